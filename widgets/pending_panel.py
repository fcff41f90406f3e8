"""The pending proposal before it executes, and the human gate (Approve / Reject with a reason).

The pending call's text arguments (a report's text, a file's content) each get a text box of their
own, shown as text, not escaped JSON: "Approve as edited" ("Apply edit" when no gate waits) sends the changed ones
(``LabView.approve_as_edited``): approved with changes at a human gate, an edit of the pending call
otherwise."""

from __future__ import annotations

import json
from collections.abc import Hashable
from typing import Any

import ipywidgets as w

from harness_lab.records.actions import Finish, ForbiddenAction

from ._panel import Panel, close_widgets, describe_error, esc, redactor
from .budget_panel import enforced_budget

__all__ = ["PendingPanel", "late_for_approval", "text_fields", "what_happens_next"]


def text_fields(proposal: Any) -> dict[str, str]:
    """The pending call's text arguments (name -> text), those a person edits as text: of
    ``Proposal.arguments``, the names ``edit_pending`` and ``approve(edited=...)`` replace."""
    return {k: v for k, v in proposal.arguments.items() if isinstance(v, str)}


def late_for_approval(run: Any) -> str:
    """Why approving the waiting action now would execute nothing ("" when it still would): the gate's
    timeout passed, or the run's wall-clock limit ran out while it waited (``approve()`` checks both)."""
    if run.waiting is None:
        return ""
    if run.gate_expired:  # the next step closes the gate
        return f"the gate's timeout ({run.contract.human_gate.timeout_seconds:g}s) passed: Step closes it (BLOCKED)"
    limit = enforced_budget(run).wall_clock_seconds
    if limit is not None and run.gates.elapsed() >= limit:
        return f"the run's wall-clock limit ({limit:g}s) ran out while it waited: an approval ends it EXHAUSTED"
    return ""


def what_happens_next(run: Any, proposal: Any) -> str:
    """A one-line forecast of the harness's decision, read from the contract (no side effect)."""
    if getattr(run, "crashed", None) is not None:
        cause = getattr(run, "crash_cause", None) or "simulated"  # a simulated fault or a real Ctrl-C
        return f"the run crashed ({cause}): this run object refuses further steps; resume from a checkpoint"
    if run.waiting is not None:
        if late := late_for_approval(run):
            return f"too late for approval, nothing will execute: {late}"
        return f"waiting for a human: {run.waiting.category} needs approval (args sha256 {run.waiting.args_sha256[:12]}…)"
    action = proposal.action
    if action is None:
        return f"refused as data: {proposal.error.code if proposal.error else 'invalid'}"
    if isinstance(action, ForbiddenAction):
        return "forbidden: would change the contract, validator or run state -> BLOCKED"
    if isinstance(action, Finish):
        return "finish is a claim: the runtime will validate the artifact" if run.validation else \
            "finish: validation is off, so it will be accepted unchecked"
    if action.gate_category in run.contract.human_gate.required_for:
        return f"gated ({action.gate_category}): the run will park and wait for a human"
    return "tool call: executes if within budget"


class PendingPanel(Panel):
    name = "pending"
    title = "Pending proposal"

    def __init__(self) -> None:
        super().__init__()
        self.html = w.HTML()
        self.reason = w.Text(placeholder="reason for rejecting", layout=w.Layout(width="260px"))
        self.approve_button = w.Button(description="Approve", button_style="success", disabled=True)
        self.reject_button = w.Button(description="Reject", button_style="danger", disabled=True)
        # the pending proposal as JSON, editable before it executes (Edit = run.edit_pending)
        self.editor = w.Textarea(layout=w.Layout(width="95%", height="4em"))
        self.edit_button = w.Button(description="Edit", tooltip="replace the pending proposal with this JSON")
        # one text box per text argument of the pending call (rebuilt when the proposal changes)
        self.fields: dict[str, w.Textarea] = {}
        self.fields_box = w.VBox()
        self.edited_button = w.Button(description="Approve as edited", button_style="success", disabled=True,
                                      tooltip="run the pending call with the text above (approved with changes at a gate)",
                                      layout=w.Layout(width="auto"))
        self.edited_button.add_class("hl-approve-as-edited")
        self.widget = w.VBox([self.html, w.HBox([self.approve_button, self.reason, self.reject_button]),
                              self.fields_box, self.edited_button,
                              w.HBox([self.editor, self.edit_button])])
        self._fields_of: Any = None  # the proposal the text boxes were made for
        self._proposal: Any = None
        self.error = ""  # what the proposer raised when asked for the next proposal, if it did
        self.ask = True  # False for the redraw after a Ctrl-C: the proposer may be what was interrupted
        self._unasked = False

    def key(self, run: Any) -> Hashable:
        # run.pending asks the proposer at most once per decision; holding it keeps its id stable.
        # A proposer that raises (a user's function, a dead server) is shown here: the other panels
        # still redraw, and the next step asks it again.
        # (run.pending asks nothing of a run that waits, ended or crashed)
        self._unasked = not self.ask and run.waiting is None and not run.state.terminal \
            and getattr(run, "crashed", None) is None
        try:
            self._proposal, self.error = (None, "") if self._unasked else (run.pending, "")
        except Exception as exc:
            self._proposal, self.error = None, describe_error(exc)
        return (self._unasked, run.step_no, run.state, id(self._proposal), run.waiting, self.error, getattr(run, "crashed", None),
                late_for_approval(run))  # time passing makes a waiting approval too late

    def edited(self) -> dict[str, str]:
        """The text arguments changed in their boxes (name -> new text)."""
        shown = text_fields(self._fields_of) if self._fields_of is not None else {}
        return {k: box.value for k, box in self.fields.items() if box.value != shown.get(k)}

    def _text_boxes(self, p: Any) -> None:
        if p is self._fields_of or (p is not None and self._fields_of is not None and p.raw == self._fields_of.raw):
            return  # the same call: keep what the person typed
        self._fields_of = p
        texts = text_fields(p) if p is not None else {}
        old = list(self.fields.values())
        self.fields = {}
        for name, text in texts.items():
            box = w.Textarea(value=text, description=name, layout=w.Layout(width="95%", height="12em"))
            box.add_class(f"hl-edit-{name}")
            self.fields[name] = box
        self.fields_box.children = tuple(self.fields.values())
        close_widgets(*old)  # with their layouts and styles: ipywidgets' registry holds each
        self.edited_button.disabled = not self.fields

    def draw(self, run: Any) -> None:
        waiting = run.waiting is not None
        self.approve_button.disabled = self.reject_button.disabled = not waiting
        # Shown as the store will keep it: the editor too (an edit sends the marks, never the secret).
        redact = redactor(run)
        p = None if self._proposal is None else redact.model(self._proposal)
        self.edit_button.disabled = waiting or p is None
        self.editor.value = "" if p is None else json.dumps(p.raw, ensure_ascii=False, default=str)
        self._text_boxes(p)
        # at a gate the edit is the approval; before one it replaces the call that will be proposed to the gate
        self.edited_button.description = "Approve as edited" if waiting else "Apply edit"
        if p is None and self.error:
            self.html.value = ("<div class='hl-pending'><b style='color:#c62828'>the proposer raised</b>: "
                               f"{esc(redact.text(self.error))} (Step asks it again)</div>")
            return
        if self._unasked:
            self.html.value = ("<div class='hl-pending'><i>the proposer was not asked again after the interrupt</i> "
                               "(Step asks it)</div>")
            return
        if p is None:
            crashed = getattr(run, "crashed", None) is not None  # (a crashed run asks its proposer nothing)
            why = esc(what_happens_next(run, None)) if crashed else f"run is {esc(run.state.value)}"
            self.html.value = f"<div class='hl-pending'><i>no pending proposal</i> ({why})</div>"
            return
        raw = json.dumps(p.raw, ensure_ascii=False, default=str)
        claims = f"<div>claims (recorded, never trusted): {esc(json.dumps(p.claims, default=str))}</div>" if p.claims else ""
        self.html.value = (
            f"<div class='hl-pending'><div>next: <b class='hl-pending-what'>{esc(p.describe())}</b></div>"
            f"<div>{esc(what_happens_next(run, p))}</div>{claims}"
            f"<pre style='white-space:pre-wrap;max-height:8em;overflow:auto'>{esc(raw[:2000])}</pre></div>"
        )
