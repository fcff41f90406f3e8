"""The event trace as a table (newest last; only the tail is drawn, so long runs stay fast).

Each row opens (an HTML ``<details>``) to the whole event as recorded, the tool result's text in full.
An effect re-sent under the idempotency key it already ran with (a resumed in-flight call, a replay)
reads "already applied", not as a second effect."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import ipywidgets as w

from ._panel import Panel, esc, redactor

__all__ = ["TracePanel", "already_applied", "event_row"]

_DETAIL = 160


def already_applied(result: Any) -> bool:
    """The outside world saw this idempotency key before and did nothing again (the executor's answer
    to a re-sent effect)."""
    return result.ok and (result.content or "").startswith("already applied")


def event_row(event: Any) -> tuple[int, int, str, str]:
    """(seq, step, kind, detail) for any trace event."""
    kind = event.kind
    if kind == "state_changed":
        detail = f"{event.before.value} -> {event.after.value}: {event.reason}"
    elif kind == "proposed":
        detail = f"{event.proposal.describe()} => {event.decision.verdict}: {event.decision.reason}"
    elif kind == "tool_called":
        r = event.result
        if already_applied(r):
            detail = f"{event.tool}: already applied, not a second effect (key {r.data.get('key', '?')})"
        else:
            detail = f"{event.tool}: {r.status}" + (f" ({r.reason})" if r.reason else "")
    elif kind == "human_decided":
        detail = f"{'approved' if event.approved else 'rejected'} by {event.by}: {event.reason}"
    elif kind == "restored":
        detail = f"state {event.state.value} from {event.source}" + (f" ({event.detail})" if event.detail else "")
    elif kind == "validated":
        detail = "accepted" if event.verdict is not None and event.verdict.accepted else "rejected or not run"
    else:
        detail = f"{getattr(event, 'topic', '')}: {getattr(event, 'message', '')}"
    return event.seq, event.step, kind, detail if len(detail) <= _DETAIL else detail[:_DETAIL - 1] + "…"


def _row_html(event: Any) -> str:
    """One trace row; its detail opens to the whole event (JSON as the store keeps it)."""
    seq, step, kind, detail = event_row(event)
    whole = event.model_dump_json(indent=1, exclude_none=True)
    style = " style='color:#2e7d32'" if "already applied, not a second effect" in detail else ""
    cell = (f"<details class='hl-trace-row'><summary{style}>{esc(detail)}</summary>"
            f"<pre style='white-space:pre-wrap;overflow-wrap:anywhere;margin:2px 0;max-height:30em;overflow:auto'>"
            f"{esc(whole)}</pre></details>")
    td = "<td style='padding:1px 6px;vertical-align:top'>"
    return f"<tr>{td}{seq}</td>{td}{step}</td>{td}{esc(kind)}</td>{td}{cell}</td></tr>"


class TracePanel(Panel):
    name = "trace"
    title = "Event trace"

    def __init__(self, tail: int = 30) -> None:
        super().__init__()
        self.tail = tail
        self.html = w.HTML()
        self.widget = self.html
        self._rows: dict[int, tuple[Any, str]] = {}  # id(event) -> (event, its row's HTML)

    def key(self, run: Any) -> Hashable:
        # the last event's seq, not the list's length: a stored run trims the list in place
        return (id(run.events), run.events[-1].seq if run.events else 0)

    def draw(self, run: Any) -> None:
        events, redact = run.events[-self.tail:], redactor(run)  # each row as the stored trace has it
        # An event never changes: its (redacted) row is made once while it stays in the tail.
        rows = {id(e): hit if (hit := self._rows.get(id(e))) is not None and hit[0] is e
                else (e, _row_html(redact.model(e))) for e in events}
        self._rows = rows
        total = max(len(run.events), events[-1].seq if events else 0)  # seq counts the trimmed ones too
        hidden = total - len(events)
        note = f"<div>{total} events; {hidden} earlier not shown</div>" if hidden else f"<div>{total} events</div>"
        head = "".join(f"<th style='text-align:left;padding:1px 6px'>{h}</th>" for h in ("seq", "step", "kind", "detail"))
        self.html.value = ("<div class='hl-trace'>" + note
                           + f"<table class='hl-table'><thead><tr>{head}</tr></thead><tbody>"
                           + "".join(rows[id(e)][1] for e in events) + "</tbody></table></div>")
