"""The run state machine with the current state lit, and the path the run took."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import ipywidgets as w

from harness_lab.records.states import RUN_TRANSITIONS, RunState

from ._panel import Panel, esc, newer, redactor

__all__ = ["StatePanel", "compress_path"]

_COLOURS = {
    RunState.REVIEW_READY: "#2e7d32",
    RunState.BLOCKED: "#c62828",
    RunState.EXHAUSTED: "#ef6c00",
    RunState.WAITING_FOR_HUMAN: "#6a1b9a",
    RunState.WAITING_FOR_ENDPOINT: "#455a64",
}


def compress_path(states: list[str]) -> list[tuple[str, int]]:
    """Runs of the same state collapse to (state, count) so a long run's path stays short."""
    out: list[tuple[str, int]] = []
    for s in states:
        if out and out[-1][0] == s:
            out[-1] = (s, out[-1][1] + 1)
        else:
            out.append((s, 1))
    return out


class StatePanel(Panel):
    name = "state"
    title = "State machine"

    def __init__(self) -> None:
        super().__init__()
        self.html = w.HTML()
        self.widget = self.html
        self._events: Any = None
        self._seen = 0  # seq of the last event read
        self.path: list[str] = []

    def _scan(self, run: Any) -> None:
        # Incremental: read just the events numbered after the last one read (a stored run trims
        # its list, so the path is kept here, not rebuilt from what the run still holds).
        if run.events is not self._events:
            self._events, self._seen, self.path = run.events, 0, [RunState.CREATED.value]
        for event in newer(run.events, self._seen, "seq"):
            if event.kind == "state_changed":
                self.path.append(event.after.value)
            elif event.kind == "restored":
                self.path.append(f"{event.state.value} (restored)")
            self._seen = event.seq

    def key(self, run: Any) -> Hashable:
        self._scan(run)
        # the step number too: a plain step changes no state, yet the panel names the current step
        return (run.state, run.step_no, len(self.path), run.stop_reason)

    def draw(self, run: Any) -> None:
        chips = []
        for state in RunState:
            lit = state == run.state
            colour = _COLOURS.get(state, "#1565c0")
            style = (f"background:{colour};color:white;font-weight:bold" if lit
                     else "background:#eeeeee;color:#555555")
            chips.append(f"<span class='hl-state{' hl-current' if lit else ''}' data-state='{state.value}' "
                         f"style='{style};padding:2px 6px;margin:2px;border-radius:4px;display:inline-block'>"
                         f"{esc(state.value)}</span>")
        nexts = ", ".join(s.value for s in sorted(RUN_TRANSITIONS[run.state], key=list(RunState).index)) or "none (terminal)"
        steps = " &rarr; ".join(esc(s) + (f" &times;{n}" if n > 1 else "") for s, n in compress_path(self.path))
        stop = (f"<div>stop reason: <b>{esc(run.stop_reason.code)}</b>: "
                f"{esc(redactor(run).text(run.stop_reason.message))}</div>"
                if run.stop_reason else "")
        self.html.value = (
            f"<div class='hl-state-panel'><div>{''.join(chips)}</div>"
            f"<div>current: <b class='hl-current-state'>{esc(run.state.value)}</b> at step {run.step_no}; "
            f"next possible: {esc(nexts)}</div><div>path: {steps}</div>{stop}</div>"
        )
