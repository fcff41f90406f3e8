"""The event trace as a table (newest last; only the tail is drawn, so long runs stay fast)."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import ipywidgets as w

from ._panel import Panel, html_table, redactor

__all__ = ["TracePanel", "event_row"]


def event_row(event: Any) -> tuple[int, int, str, str]:
    """(seq, step, kind, detail) for any trace event."""
    kind = event.kind
    if kind == "state_changed":
        detail = f"{event.before.value} -> {event.after.value}: {event.reason}"
    elif kind == "proposed":
        detail = f"{event.proposal.describe()} => {event.decision.verdict}: {event.decision.reason}"
    elif kind == "tool_called":
        r = event.result
        detail = f"{event.tool}: {r.status}" + (f" ({r.reason})" if r.reason else "")
    elif kind == "human_decided":
        detail = f"{'approved' if event.approved else 'rejected'} by {event.by}: {event.reason}"
    elif kind == "restored":
        detail = f"state {event.state.value} from {event.source}" + (f" ({event.detail})" if event.detail else "")
    elif kind == "validated":
        detail = "accepted" if event.verdict is not None and event.verdict.accepted else "rejected or not run"
    else:
        detail = f"{getattr(event, 'topic', '')}: {getattr(event, 'message', '')}"
    return event.seq, event.step, kind, detail if len(detail) <= 160 else detail[:159] + "…"


class TracePanel(Panel):
    name = "trace"
    title = "Event trace"

    def __init__(self, tail: int = 30) -> None:
        super().__init__()
        self.tail = tail
        self.html = w.HTML()
        self.widget = self.html
        self._rows: dict[int, tuple[Any, tuple[int, int, str, str]]] = {}  # id(event) -> (event, its row)

    def key(self, run: Any) -> Hashable:
        # the last event's seq, not the list's length: a stored run trims the list in place
        return (id(run.events), run.events[-1].seq if run.events else 0)

    def draw(self, run: Any) -> None:
        events, redact = run.events[-self.tail:], redactor(run)  # each row as the stored trace has it
        # An event never changes: its (redacted) row is made once while it stays in the tail.
        rows = {id(e): hit if (hit := self._rows.get(id(e))) is not None and hit[0] is e
                else (e, event_row(redact.model(e))) for e in events}
        self._rows = rows
        total = max(len(run.events), events[-1].seq if events else 0)  # seq counts the trimmed ones too
        hidden = total - len(events)
        note = f"<div>{total} events; {hidden} earlier not shown</div>" if hidden else f"<div>{total} events</div>"
        self.html.value = ("<div class='hl-trace'>" + note
                           + html_table(("seq", "step", "kind", "detail"), [rows[id(e)][1] for e in events])
                           + "</div>")
