"""The timeline: a scrubber over every step of the run (``run.history``) and the selected step as
``run.at(n)`` shows it: the context the proposer saw, the proposal, the decision, the tool result in
full, the verdict, the budget spent, the workspace files with their diff against the step before,
and a file view (report.md by default) of a file's text at that step.

Thin: the panel reads ``run.history`` and ``run.at(n)``; picking a step (slider or list) is
``LabView.select_step(n)`` and picking a file ``LabView.show_file(path)``, so a notebook cell does
what a click does. A run without a store has no history: the panel says so in one line.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable
from typing import Any

import ipywidgets as w

from harness_lab.errors import HarnessLabError
from harness_lab.timeline.travel import travel_store

from ._panel import Panel, describe_error, esc, html_table, newer, redactor
from .context_panel import context_html
from .verdict_panel import check_rows

__all__ = ["TimelinePanel", "point_label"]

_INCREMENT = 50  # more new steps than this since the last draw: read the history whole
_LISTED = 200  # steps in the "go to" list
_PRE = "<pre style='white-space:pre-wrap;overflow-wrap:anywhere;margin:2px 0;max-height:30em;overflow:auto'>"


def point_label(point: Any, own: str | None = None) -> str:
    """One line per step for the step list: "3 · write_report → execute · RUNNING"; a step of another
    run than ``own`` (a fork's timeline starts with its source's steps) says whose it is."""
    what = " → ".join(x for x in (point.tool, point.decision) if x) or "registered"
    tail = f" · {point.stop}" if point.stop else ""
    verdict = "" if point.accepted is None else " · accepted" if point.accepted else " · rejected"
    whose = f" · from {point.run_id}" if own is not None and point.run_id != own else ""
    return f"{point.step} · {what} · {point.state.value}{verdict}{tail}{whose}"


def _spent(usage: Any) -> str:
    return (f"{usage.decisions} decisions, {usage.tool_calls} tool calls, {usage.tokens} tokens, "
            f"{usage.elapsed_s:g} s")


class TimelinePanel(Panel):
    name = "timeline"
    title = "Timeline (every step; pick one to see what the model saw)"

    def __init__(self) -> None:
        super().__init__()
        self.slider = w.IntSlider(min=0, max=0, value=0, description="step", continuous_update=False,
                                  layout=w.Layout(width="60%"))
        self.picker = w.Dropdown(options=[], description="go to", layout=w.Layout(width="38%"))
        self.slider.add_class("hl-timeline-slider")
        self.picker.add_class("hl-timeline-picker")
        self.strip = w.HTML()  # one chip per step, coloured by decision (the last ones on a long run)
        self.header = w.HTML()
        self.context = w.HTML(layout=w.Layout(width="100%"))
        self.context.add_class("hl-step-context")
        self.details = w.HTML(layout=w.Layout(width="100%"))
        self.files = w.HTML(layout=w.Layout(width="100%"))
        self.file_picker = w.Dropdown(options=[], description="file", layout=w.Layout(width="320px"))
        self.file_picker.add_class("hl-file-picker")
        self.file_view = w.HTML(layout=w.Layout(width="100%"))
        self.file_view.add_class("hl-file-view")
        self.fork_fresh_button = w.Button(description="Fork here: fresh budget", button_style="info",
                                          tooltip="a new run that redoes this step with nothing spent",
                                          layout=w.Layout(width="auto"))
        self.fork_keep_button = w.Button(description="Fork here: keep budget", layout=w.Layout(width="auto"),
                                         tooltip="a new run that redoes this step with the spend it started with")
        self.snapshot_button = w.Button(description="Snapshot now", tooltip="snapshot the workspace and run state now")
        for b, cls in ((self.fork_fresh_button, "hl-fork-fresh"), (self.fork_keep_button, "hl-fork-keep"),
                       (self.snapshot_button, "hl-snapshot-now")):
            b.add_class(cls)
        self.widget = w.VBox([
            w.HBox([self.slider, self.picker]), self.strip, self.header,
            w.HBox([self.fork_fresh_button, self.fork_keep_button, self.snapshot_button]),
            w.HTML("<b>context the proposer saw</b>"), self.context, self.details, self.files,
            w.HBox([self.file_picker]), self.file_view])
        self.points: list[Any] = []
        self.selected: int | None = None  # None: follow the run's newest step
        self.view: Any = None  # the selected step's StepView
        self.file: str | None = None
        self.error = ""
        self.on_pick: Callable[[int], None] | None = None  # LabView.select_step, set by the view
        self.on_file: Callable[[str], None] | None = None
        self._syncing = False
        self._run: Any = None  # the run the points were read from
        self._seen = 0  # seq of the last event read (a restore re-reads the history)
        self.slider.observe(self._picked, names="value")
        self.picker.observe(self._picked, names="value")
        self.file_picker.observe(self._file_picked, names="value")

    def _picked(self, change: dict[str, Any]) -> None:
        if self._syncing or change["new"] is None or self.on_pick is None:
            return
        try:
            self.on_pick(int(change["new"]))
        except Exception:
            pass  # shown by LabView in the status line

    def _file_picked(self, change: dict[str, Any]) -> None:
        if not self._syncing and change["new"] and self.on_file is not None:
            try:
                self.on_file(str(change["new"]))
            except Exception:
                pass

    def key(self, run: Any) -> Hashable:
        try:
            travel_store(run)
        except HarnessLabError:  # no store, no history: the one line drawn once stays true
            return (id(run), "no timeline")
        return (id(run), run.step_no, run.state, self.selected, self.file)

    def _read_points(self, run: Any) -> list[Any]:
        """``run.history``, read whole only when it may have changed behind the points held (another run,
        a restore, the run went back) or many steps came: otherwise the new steps' points, one
        ``run.at(k)`` each (reading the whole history every step grows with the run: ~90 ms at 1,000)."""
        seen = self._seen
        restored = any(e.kind == "restored" for e in newer(run.events, seen, "seq"))
        self._seen = run.events[-1].seq if run.events else seen
        last = self.points[-1].step if self.points else -1
        if run is not self._run or restored or not self.points or run.step_no < last or run.step_no - last > _INCREMENT:
            self._run = run
            return list(run.history)
        return self.points + [run.at(k).point for k in range(last + 1, run.step_no + 1)]

    def draw(self, run: Any) -> None:
        try:
            self.points = self._read_points(run)
        except Exception as exc:  # a run without a store: no history to travel in
            self.points, self.view, self.error = [], None, describe_error(exc)
            self.strip.value = f"<div class='hl-timeline'><i>no timeline: {esc(self.error)}</i></div>"
            for part in (self.header, self.context, self.details, self.files, self.file_view):
                part.value = ""
            self.fork_fresh_button.disabled = self.fork_keep_button.disabled = True
            return
        self.error = ""
        last = self.points[-1].step if self.points else 0
        n = last if self.selected is None else min(self.selected, last)
        self._syncing = True
        try:
            self.slider.max = last
            self.slider.value = n
            # the list holds the newest steps (and the one picked): the slider reaches every step
            shown = self.points[-_LISTED:]
            if shown and n < shown[0].step:
                shown = [p for p in self.points if p.step == n] + shown
            self.picker.options = [(point_label(p, run.run_id), p.step) for p in shown]
            self.picker.value = n
        finally:
            self._syncing = False
        self.strip.value = self._strip(n, run.run_id)
        self.view = run.at(n)
        self._draw_step(run, self.view)
        self.fork_fresh_button.disabled = self.fork_keep_button.disabled = False

    def _strip(self, n: int, own: str) -> str:
        chips = []
        for p in self.points[-60:]:  # a long run: the newest steps; the slider reaches the rest
            colour = ("#2e7d32" if p.accepted else "#c62828" if p.accepted is False or p.stop
                      else "#1565c0" if p.decision in (None, "execute") else "#ef6c00")
            edge = "outline:2px solid black;" if p.step == n else ""
            edge += "opacity:0.45;" if p.run_id != own else ""  # the source's steps before a fork point
            chips.append(f"<span class='hl-step-chip' title='{esc(point_label(p, own))}' style='{edge}background:{colour};"
                         f"color:white;padding:0 4px;margin:1px;border-radius:3px;display:inline-block'>{p.step}</span>")
        return f"<div class='hl-timeline'>{len(self.points)} points (step 0 = registered): {''.join(chips)}</div>"

    def _draw_step(self, run: Any, view: Any) -> None:
        redact = redactor(run)
        point = view.point
        self.header.value = (f"<div class='hl-step-header'><b>step {view.step}</b>: {esc(point_label(point, run.run_id))}; "
                             f"spent after it: {esc(_spent(point.spent))}</div>")
        self.context.value = ("<i>step 0: nothing was proposed</i>" if view.context is None
                              else context_html(view.context, redact.text, view.ref))
        parts = []
        if view.proposal is not None:
            raw = json.dumps(redact.model(view.proposal).raw, ensure_ascii=False, indent=1, default=str)
            parts.append(f"<div><b>proposal</b>: {esc(view.proposal.describe())}</div>{_PRE}{esc(raw)}</pre>")
        if view.decision is not None:
            parts.append(f"<div><b>decision</b>: {esc(view.decision.verdict)}: {esc(redact.text(view.decision.reason))}</div>")
        if view.result is not None:
            r = redact.model(view.result)
            why = f" ({esc(r.reason)})" if r.reason else ""
            parts.append(f"<div><b>result</b>: {esc(r.tool)} {esc(r.status)}{why}</div>{_PRE}{esc(r.content or '')}</pre>")
        if view.verdict is not None:
            parts.append("<div><b>verdict</b></div>" + html_table(("check", "outcome", "messages"), check_rows(view.verdict)))
        if view.stop is not None:
            parts.append(f"<div><b>stop</b>: {esc(view.stop.code)}: {esc(redact.text(view.stop.message))}</div>")
        self.details.value = f"<div class='hl-step-details'>{''.join(parts)}</div>"
        changes = "".join(
            f"<div>{esc(c.change)} <b>{esc(c.path)}</b></div>{_PRE}{esc(redact.text(c.diff))}</pre>" for c in view.changes)
        self.files.value = (f"<div class='hl-step-files'><b>files after step {view.step}</b>: {len(view.files)}; "
                            f"changed against step {max(view.step - 1, 0)}: {len(view.changes) or 'none'}{changes}</div>")
        paths = sorted(view.files)
        if self.file not in view.files:
            self.file = "report.md" if "report.md" in view.files else (paths[0] if paths else None)
        self._syncing = True
        try:
            self.file_picker.options = paths
            self.file_picker.value = self.file
        finally:
            self._syncing = False
        self.file_view.value = self._file_html(run, view)

    def _file_html(self, run: Any, view: Any) -> str:
        if self.file is None:
            return f"<i>no files in the workspace at step {view.step}</i>"
        try:
            text = redactor(run).text(view.file_text(self.file))
        except Exception as exc:  # absent, binary, or its bytes not stored: the one line says which
            return f"<div class='hl-file'><i>{esc(describe_error(exc))}</i></div>"
        return (f"<div class='hl-file'><b>{esc(self.file)}</b> at step {view.step}:"
                f"<pre class='hl-file-text' style='white-space:pre-wrap;overflow-wrap:anywhere;margin:2px 0'>"
                f"{esc(text)}</pre></div>")
