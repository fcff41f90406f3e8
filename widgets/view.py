"""LabView: one dashboard over a live run.

Thin on purpose: the view holds a run and renders it. Every button is one public method here
(``step``, ``run_to_gate``, ``run_to_end``, ``run_to``, ``approve``, ``approve_as_edited``, ``reject``,
``rollback``, ``fork``, ``inject``, ``close``; the debugger's ``select_step``, ``show_file``, ``fork_here``,
``snapshot_now``, ``compare``), each one call on the run (``close`` on the dashboard), so a notebook cell, a test or
papermill does exactly what a click does. After each call only the panels whose key changed are redrawn.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar

import ipywidgets as w

from harness_lab.errors import HarnessLabError
from harness_lab.records.actions import TOOL_KINDS
from harness_lab.records.events import StepRecord
from harness_lab.records.states import RunState

from ._panel import Panel, close_widgets, describe_error, esc, newer, redactor
from .budget_panel import BudgetPanel
from .compare_panel import CompareView
from .context_panel import ContextPanel
from .fault_panel import FaultPanel
from .pending_panel import PendingPanel
from .plot_panel import PlotPanel, budget_series
from .session import Session
from .snapshot_panel import SnapshotPanel
from .state_panel import StatePanel
from .timeline_panel import TimelinePanel
from .trace_panel import TracePanel
from .verdict_panel import VerdictPanel

__all__ = ["LabView"]

class _Spent(NamedTuple):
    """A history point as budget_series reads a step record: its step and the budget spent after it."""

    step: int
    usage: Any


# A step whose decision is anything but a plain tool call is where the harness intervened.
_PLAIN = frozenset({"execute"})
_T = TypeVar("_T")


class LabView:
    """A dashboard over ``run``; display it as the last expression of a cell."""

    def __init__(self, run: Any, *, plot: bool = True, trace_rows: int = 30,
                 parent: dict[str, list[float]] | None = None) -> None:
        self.run = run
        self.state = StatePanel()
        self.budget = BudgetPanel()
        self.pending = PendingPanel()
        self.verdicts = VerdictPanel()
        self.context = ContextPanel()
        self.snapshots = SnapshotPanel()
        self.faults = FaultPanel()
        self.trace = TracePanel(tail=trace_rows)
        self.plot: PlotPanel | None = PlotPanel(parent) if plot else None
        self.timeline = TimelinePanel()
        self.comparison = CompareView()
        self.compare_button = w.Button(description="Compare", tooltip="compare with the parent run (a fork) or the newest fork")
        # pending first: asking the proposer spends tokens, which the budget panel must then show
        self.panels: dict[str, Panel] = {p.name: p for p in (
            self.pending, self.state, self.budget, self.verdicts, self.context, self.snapshots, self.faults,
            self.trace, *([self.plot] if self.plot else []), self.timeline)}
        self.status = w.HTML()
        self.status.add_class("hl-status")
        self.step_button = w.Button(description="Step", button_style="primary")
        self.gate_button = w.Button(description="Run to gate")
        self.end_button = w.Button(description="Run to end")
        self.close_button = w.Button(description="Close", tooltip="close this dashboard and its forks'")
        # Run to: a breakpoint picked here ("end", a tool kind, a step number)
        self.until = w.Dropdown(options=["end", "gate", *(f"tool: {k}" for k in sorted(TOOL_KINDS)), "step"], value="end",
                                description="Run to", layout=w.Layout(width="220px"))
        self.until_step = w.BoundedIntText(value=1, min=0, max=10**9, layout=w.Layout(width="80px"))
        self.run_to_button = w.Button(description="Run to", tooltip="run until the breakpoint picked beside")
        self.timeline.on_pick = self.select_step
        self.timeline.on_file = self.show_file
        for button, action in (
            (self.step_button, self.step), (self.gate_button, self.run_to_gate), (self.end_button, self.run_to_end),
            (self.pending.approve_button, self.approve), (self.pending.edit_button, self.edit_pending),
            (self.pending.reject_button, lambda: self.reject(self.pending.reason.value)),
            (self.snapshots.rollback_button, self.rollback), (self.snapshots.fork_button, self.fork),
            (self.faults.inject_button, self.inject), (self.close_button, self.close),
            (self.run_to_button, self._run_to_picked), (self.pending.edited_button, self.approve_as_edited),
            (self.timeline.fork_fresh_button, lambda: self.fork_here(budget="fresh")),
            (self.timeline.fork_keep_button, lambda: self.fork_here(budget="keep")),
            (self.timeline.snapshot_button, self.snapshot_now), (self.compare_button, self.compare),
        ):
            button.add_class("hl-" + button.description.lower().replace(" ", "-"))
            button.on_click(self._clicked(action))
        self.forks: list[LabView] = []
        self.parent: LabView | None = None  # the dashboard this fork was made from
        self._owns_run = False  # True for a fork's view: the view made that run (see close)
        self.forks_box = w.VBox()  # each fork's own dashboard, newest last
        self.session = Session()  # every call below, replayable headless (Session.replay)
        self.last_changed: list[str] = []
        self._taken = 0
        self.widget = self._layout()
        self.refresh(force=True)

    # -- the buttons, as Python calls -------------------------------------------------------------
    def step(self) -> StepRecord:
        """One decision (``run.step()``)."""
        return self._act("step", {}, self.run.step)

    def run_to_gate(self, max_steps: int = 1000) -> list[StepRecord]:
        """Step until the harness intervenes: a human gate, a validation, a refusal, or a stop."""
        def until_gate() -> list[StepRecord]:
            taken: list[StepRecord] = []
            while len(taken) < max_steps and self.run.step_due:
                taken.append(self.run.step())
                self._progress("running to the gate", len(taken))
                if taken[-1].decision.verdict not in _PLAIN:
                    break
            return taken
        return self._act("run_to_gate", {"max_steps": max_steps}, self._busy(until_gate))

    def run_to_end(self, max_steps: int | None = None) -> RunState:
        """What ``run.run(max_steps=...)`` does: to a terminal state; a human gate still stops it (no one
        approves for you) unless its timeout passed (the step closes it). Taken one ``run.step()`` at a
        time, so the status line shows progress."""
        def to_end() -> RunState:
            taken = 0
            while self.run.step_due and (max_steps is None or taken < max_steps):
                self.run.step()
                taken += 1
                self._progress("running to the end", taken)
            return RunState(self.run.state)
        return self._act("run_to_end", {"max_steps": max_steps}, self._busy(to_end))

    def run_to(self, until: Any = "end", max_steps: int | None = None) -> RunState:
        """The "Run to" button: ``"end"`` (``run_to_end``), ``"gate"`` (``run_to_gate``), or a breakpoint
        for ``run.run(until=...)``: a step number, ``"tool: <kind>"`` (stops before executing it, the call
        pending), a ``RunState``, a :class:`harness_lab.timeline.Breakpoint` or a predicate."""
        if until == "end":
            return self.run_to_end(max_steps)
        if until == "gate":
            self.run_to_gate(**({} if max_steps is None else {"max_steps": max_steps}))
            return RunState(self.run.state)
        breakpoint_ = self._breakpoint(until)
        shown = until if isinstance(until, (str, int)) else repr(until)  # a session entry holds plain values
        return self._act("run_to", {"until": shown, "max_steps": max_steps},
                         self._busy(lambda: RunState(self.run.run(until=breakpoint_, max_steps=max_steps))))

    @staticmethod
    def _breakpoint(until: Any) -> Any:
        if isinstance(until, bool) or not isinstance(until, (int, str)):
            return until  # a RunState, a Breakpoint or a predicate: the run checks it
        kind, _, value = until.partition(":") if isinstance(until, str) else ("step", "", "")
        if kind.strip() not in ("step", "tool") or (kind.strip() == "tool" and not value.strip()):
            raise ValueError(f"run_to: unknown breakpoint {until!r}; use 'end', 'gate', 'tool: <kind>' or a step number")
        from harness_lab.timeline import Breakpoint

        return Breakpoint.step(until) if isinstance(until, int) else Breakpoint.tool(value.strip())

    def _run_to_picked(self) -> RunState:
        picked = self.until.value
        return self.run_to(int(self.until_step.value) if picked == "step" else picked)

    def _busy(self, work: Callable[[], _T]) -> Callable[[], _T]:
        """Long work: the run buttons are off meanwhile (a click would only queue behind it);
        refresh() turns them back on as the run's state allows."""
        def call() -> _T:
            self.step_button.disabled = self.gate_button.disabled = self.end_button.disabled = True
            return work()
        return call

    def _progress(self, doing: str, taken: int) -> None:
        # Only the status line: the panels would ask the proposer for the next proposal
        # (run.pending) in the middle of the loop; they redraw once the call returns.
        self._taken = taken
        self.status.value = (f"<span>{esc(doing)}: step {self.run.step_no} done ({taken} taken), "
                             f"{esc(self.run.state.value)}…</span>")

    def approve(self, *, by: str = "human") -> StepRecord:
        """``run.approve()``: execute exactly the parked action."""
        return self._act("approve", {"by": by}, lambda: self.run.approve(by=by))

    def approve_as_edited(self, *, by: str = "human", **fields: object) -> Any:
        """The "Approve as edited" button: the pending call with these arguments replaced (default: the
        text boxes' changed ones), text as text. At a human gate ``run.approve(edited=fields)`` (what
        executes is exactly the edited call, recorded as such); otherwise ``run.edit_pending(**fields)``."""
        edits = dict(fields) if fields else self.pending.edited()
        args: dict[str, Any] = {"by": by, **edits}

        def edit() -> Any:
            if not edits:
                raise ValueError("nothing edited: change a text box of the pending call first")
            if self.run.waiting is not None:
                return self.run.approve(by=by, edited=edits)
            return self.run.edit_pending(by=by, **edits)
        return self._act("approve_as_edited", args, edit)

    def reject(self, reason: str, *, by: str = "human") -> StepRecord:
        """``run.reject(reason)``: the run stops safely with the reason kept."""
        def reject() -> StepRecord:
            if not reason.strip():
                raise ValueError("a rejection needs a reason")
            return self.run.reject(reason, by=by)
        return self._act("reject", {"reason": reason, "by": by}, reject)

    def edit_pending(self, raw: object | None = None, *, by: str = "human") -> Any:
        """``run.edit_pending(raw)``: replace the proposal before it executes (default: the editor's JSON)."""
        args: dict[str, Any] = {"raw": raw, "by": by}  # the session records the proposal as parsed

        def edit() -> Any:
            if raw is None:
                try:
                    args["raw"] = json.loads(self.pending.editor.value)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"the edited proposal is not JSON: {exc.msg} at column {exc.colno}") from None
            return self.run.edit_pending(args["raw"], by=by)
        return self._act("edit_pending", args, edit)

    def rollback(self, snapshot_id: str | None = None) -> None:
        """``run.rollback(id)``: files, run state and context go back together (default: the picked one)."""
        target = snapshot_id or self.snapshots.picker.value

        def rollback() -> None:
            if not target:
                raise ValueError("no snapshot to roll back to")
            self.run.rollback(target)
        self._act("rollback", {"snapshot_id": target}, rollback)

    def fork(self, snapshot_id: str | None = None) -> LabView:
        """``run.fork(id)``: a new run from a snapshot, shown in its own LabView; this run is untouched."""
        if not hasattr(self.run, "fork"):
            raise HarnessLabError("this runtime has no Run.fork yet")
        target = snapshot_id or self.snapshots.picker.value
        try:
            if not target:
                raise ValueError("no snapshot to fork from")
            forked = self.run.fork(target, new_run_id=self._fork_id())
        except Exception as exc:
            self.show_error(exc)
            raise
        self.session.record(self.run, "fork", {"snapshot_id": target})
        return self._show_fork(forked, target, parent_upto=forked.step_no)

    def _show_fork(self, forked: Any, source: str, *, parent_upto: int) -> LabView:
        # the child's budget plot shows this run's history up to the fork point, faded: from the store's
        # history when there is one (a stored run keeps only its last records in memory)
        parent = None
        if self.plot:
            try:
                steps: list[Any] = [_Spent(p.step, p.spent) for p in self.run.history if 0 < p.step <= parent_upto]
            except HarnessLabError:
                steps = [r for r in self.run.records if r.step <= parent_upto]
            parent = budget_series(self.run, steps)
        child = LabView(forked, plot=self.plot is not None, trace_rows=self.trace.tail, parent=parent)
        child._owns_run, child.parent = True, self
        self.forks.append(child)
        # shown under this dashboard: a click has no cell output to display the returned view in
        title = w.HTML(f"<b>fork {esc(child.run.run_id)}</b> of {esc(self.run.run_id)} from {esc(source)}")
        self.forks_box.children = (*self.forks_box.children, w.VBox([title, child.widget]))
        self.refresh()
        self.status.value = f"<span>{esc(self.summary())}; forked {esc(child.run.run_id)} from {esc(source)} (below)</span>"
        return child

    def select_step(self, n: int) -> Any:
        """Pick step ``n`` on the timeline: the panel shows ``run.at(n)`` (context, proposal, result,
        verdict, files and diff); returns that StepView. A step out of range: one line, nothing changed."""
        if isinstance(n, bool) or not isinstance(n, int):
            raise ValueError(f"select_step: a step number, not {n!r}")
        try:
            view = self.run.at(n)  # checks the range (one line naming n and the range)
        except Exception as exc:
            self.show_error(exc)
            raise
        self.timeline.selected = n
        self.refresh()
        return view

    def show_file(self, path: str) -> str:
        """The file view: workspace file ``path`` as it was after the selected step; returns its text."""
        view = self.timeline.view
        try:
            if view is None:
                raise ValueError("no step selected: the run has no timeline")
            text = view.file_text(path)  # absent or binary: one line naming the path and the step
        except Exception as exc:
            self.show_error(exc)
            raise
        self.timeline.file = path
        self.refresh()
        return str(text)

    def fork_here(self, budget: Any = "fresh", *, step: int | None = None) -> LabView:
        """"Fork here": a new run that redoes the selected step (default: the newest), from the state it
        started in (``run.fork(at_step=step - 1, budget=budget)``): its pending proposal is that step's
        again, to edit and run another way; ``budget`` "fresh" (nothing spent), "keep" (the spend the step
        started with) or a mapping. Shown in its own LabView below; this run is untouched."""
        n = step if step is not None else self.timeline.selected if self.timeline.selected is not None else self.run.step_no
        at = max(int(n) - 1, 0)
        try:
            forked = self.run.fork(at_step=at, budget=budget, new_run_id=self._fork_id())
        except Exception as exc:
            self.show_error(exc)
            raise
        shown = budget if isinstance(budget, str) else dict(budget)
        self.session.record(self.run, "fork_here", {"budget": shown, "step": int(n)})
        return self._show_fork(forked, f"step {at} (to redo step {n}), {budget if isinstance(budget, str) else 'set'} budget",
                               parent_upto=at)

    def snapshot_now(self, label: str = "manual") -> Any:
        """"Snapshot now": ``run.snapshot(label)``: the files and run state, for Roll back and Fork."""
        return self._act("snapshot_now", {"label": label}, lambda: self.run.snapshot(label))

    def compare(self, other: Any = None) -> Any:
        """The Compare button: this run and ``other`` (a Run or LabView; default: the parent run for a
        fork, else the newest fork) side by side: ``harness_lab.timeline.compare``'s first differing step
        and the context, decision and file diffs there (shown below the timeline); returns it."""
        from harness_lab.timeline import compare

        try:
            if other is None:
                other = self.parent if self.parent is not None else self.forks[-1] if self.forks else None
                if other is None:
                    raise ValueError("nothing to compare with: fork this run first, or pass the other run")
            run = other.run if isinstance(other, LabView) else other
            # the source first: a fork is compared from its fork point
            cmp = compare(run, self.run) if other is self.parent or run is getattr(self.parent, "run", None) \
                else compare(self.run, run)
        except Exception as exc:
            self.show_error(exc)
            raise
        self.comparison.show(self.run, cmp)
        self.status.value = f"<span>{esc(self.summary())}; {esc(redactor(self.run).text(cmp.summary()))}</span>"
        return cmp

    def _fork_id(self) -> str | None:
        """Without a store the runtime has nothing to look ids up in and names every fork of a run
        "<id>-fork1": number this view's forks so their dashboards can be told apart (with a store,
        the runtime picks an id the store does not hold)."""
        if getattr(self.run, "checkpoints", None) is not None:
            return None
        taken, n = {child.run.run_id for child in self.forks}, 1
        while f"{self.run.run_id}-fork{n}" in taken:
            n += 1
        return f"{self.run.run_id}-fork{n}"

    def inject(self, name: str | None = None) -> Any:
        """``run.inject(name)``: the fault (default: the picked one) changes the next step."""
        fault = name or self.faults.picker.value
        def inject() -> Any:
            result = self.run.inject(fault)
            self.faults.injected.append(str(getattr(result, "name", fault)))  # a Fault object: its name
            return result
        return self._act("inject", {"name": fault}, inject)

    def close(self) -> None:
        """The Close button: close this dashboard's widgets and its forks' dashboards, and the runs the
        view made (its forks', unless a store holds one: its workspace stays for ``Run.resume``). The run
        it was given stays open, yours to use and close; nothing here holds it any more, so once you drop
        it (and the view) it is collected and its temporary folders go. Not recorded in the session."""
        for child in self.forks:
            child.close()
        self.forks = []
        # ipywidgets' registry holds every open widget, whose click handlers hold this view and its run
        close_widgets(self.widget, self.status, *(p.widget for p in self.panels.values()), self.comparison.widget)
        if self._owns_run and getattr(self.run, "checkpoints", None) is None:
            self.run.close()

    def _act(self, name: str, args: dict[str, Any], call: Callable[[], _T]) -> _T:
        """Every button's shape: make the run's call, redraw (even when it raised, showing the error in
        the status line), and record it in the session once it succeeded (a failed call is not replayed)."""
        self._taken = 0  # steps a run_to_* loop completed, should it be interrupted
        seen = self.run.events[-1].seq if self.run.events else 0
        try:
            result = call()
        except Exception as exc:
            self.refresh()
            self.show_error(exc)
            raise
        except BaseException as exc:  # Ctrl-C (Jupyter's Interrupt): the run undid the step or crashed
            self._interrupted(name, args, exc)
            raise
        # Recorded before the redraw, which asks the proposer for the next proposal: a Ctrl-C there
        # (a slow model) must not lose a call that was made.
        self.session.record(self.run, name, args)
        self._taken = 0
        try:
            self.refresh()
        except BaseException as exc:
            if not isinstance(exc, Exception):
                self._interrupted(name, args, exc)
            raise
        self._say_discarded(seen)
        return result

    def _say_discarded(self, seen: int) -> None:
        """The pending proposal shown (or edited) was not what ran: the workspace changed outside the run,
        so the step discarded it and asked the proposer again. Say so beside the summary, not only in the trace."""
        steps = [str(e.step) for e in newer(self.run.events, seen, "seq")
                 if e.kind == "note" and getattr(e, "topic", "") == "pending_discarded"]
        if steps:
            self.status.value = (f"<span>{esc(self.summary())}; the workspace changed outside the run: step "
                                 f"{', '.join(steps)} discarded the pending proposal and asked the proposer again "
                                 "(see the trace)</span>")

    def _interrupted(self, name: str, args: dict[str, Any], exc: BaseException) -> None:
        """Redraw without asking the proposer (it may be what was interrupted: a slow model), turn the
        run buttons back on as the run allows, say so, and record the steps a loop completed so a
        replay makes them too (not a crashed run's: no replay reproduces the crash)."""
        self.pending.ask = False
        try:
            self.refresh()
        finally:
            self.pending.ask = True
        if self._taken and getattr(self.run, "crashed", None) is None:
            self.session.record(self.run, name, {**args, "max_steps": self._taken})
        where = "" if getattr(self.run, "crashed", None) is not None else "; the run is as its last whole step left it"
        done = f" after {self._taken} step(s)" if name.startswith("run_to") else ""
        self.status.value = (f"<span style='color:#c62828'>{esc(name)} interrupted ({esc(type(exc).__name__)})"
                             f"{done}: {esc(self.summary())}{where}</span>")

    # -- rendering --------------------------------------------------------------------------------
    def refresh(self, *, force: bool = False) -> list[str]:
        """Redraw the panels whose content changed (all with ``force``); returns their names."""
        self.last_changed = [name for name, panel in self.panels.items() if panel.update(self.run, force=force)]
        stopped = self.run.state.terminal or getattr(self.run, "crashed", None) is not None
        self.step_button.disabled = self.gate_button.disabled = self.end_button.disabled = (
            stopped or not self.run.step_due)
        # a call from a notebook cell redraws the status line too, not only a click
        self.status.value = f"<span>{esc(self.summary())}</span>"
        return self.last_changed

    def show_error(self, exc: BaseException) -> None:
        """Show a failed call in the status line (a click has no cell to raise into)."""
        # an error may quote what a tool or the endpoint said
        self.status.value = f"<span style='color:#c62828'>{esc(redactor(self.run).text(describe_error(exc)))}</span>"

    def _clicked(self, action: Callable[[], object]) -> Callable[[w.Button], None]:
        def handler(_button: w.Button) -> None:
            try:
                action()
            except Exception as exc:  # a click never raises into the page: ipywidgets would only log it
                self.show_error(exc)
        return handler

    def summary(self) -> str:
        run = self.run
        stop = f" ({run.stop_reason.code})" if run.stop_reason else ""
        waiting = " waiting for a human" if run.waiting is not None else ""
        crashed = getattr(run, "crashed", None)
        # a crash (simulated, or a Ctrl-C mid-step) leaves the state as it was, but this run object
        # refuses every further step
        cause = getattr(run, "crash_cause", None)
        dead = (f"; crashed at {getattr(crashed, 'value', crashed)}{f' ({cause})' if cause else ''}: resume from a checkpoint"
                if crashed is not None else "")
        return f"{run.run_id}: {run.state.value}{stop} after step {run.step_no}{waiting}{dead}"

    def _box(self, panel: Panel) -> w.Widget:
        box = w.VBox([w.HTML(f"<b>{esc(panel.title)}</b>"), panel.widget],
                     layout=w.Layout(border="1px solid #ddd", padding="4px", margin="2px"))
        box.add_class(f"hl-panel-{panel.name}")
        return box

    def _layout(self) -> w.Widget:
        controls = w.HBox([self.step_button, self.gate_button, self.end_button, self.until, self.until_step,
                           self.run_to_button, self.status, self.close_button])
        left = w.VBox([self._box(self.state), self._box(self.budget), self._box(self.pending), self._box(self.verdicts)],
                      layout=w.Layout(width="50%"))
        right_panels = [self.snapshots, self.faults, *([self.plot] if self.plot else [])]
        right = w.VBox([self._box(p) for p in right_panels], layout=w.Layout(width="50%"))
        # the context spans the dashboard: beside the other panels its text column got ~12 characters at 1280 px
        compare = w.VBox([w.HBox([w.HTML("<b>Compare runs</b>"), self.compare_button]), self.comparison.widget],
                         layout=w.Layout(border="1px solid #ddd", padding="4px", margin="2px"))
        compare.add_class("hl-panel-compare")
        root = w.VBox([controls, w.HBox([left, right]), self._box(self.context), self._box(self.timeline), compare,
                       self._box(self.trace), self.forks_box])
        root.add_class("hl-labview")
        return root

    def __repr__(self) -> str:
        return f"LabView({self.summary()})"

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any] | None:
        # The widget view plus a stable text/plain line (ipywidgets' default repr lists model ids).
        bundle = self.widget._repr_mimebundle_(**kwargs)
        if bundle is not None:
            bundle["text/plain"] = repr(self)
        return bundle
