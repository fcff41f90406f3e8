"""The panel protocol: a panel holds widgets and redraws only when its key changed.

``key(run)`` is cheap (no rendering); :meth:`Panel.update` compares it with the last drawn key and
calls ``draw`` only on a change, so a step redraws the panels it touched and nothing else.

What a panel shows of a run's records and texts passes :func:`redactor` first: the store's redactor,
so the dashboard hides the secrets the trace hides.
"""

from __future__ import annotations

import html
from collections.abc import Hashable, Iterable, Sequence
from typing import Any

import ipywidgets as w

from harness_lab.errors import HarnessLabError
from harness_lab.records.redaction import Redactor, redactor_for

__all__ = ["Panel", "close_widgets", "describe_error", "esc", "html_table", "newer", "redactor"]


def redactor(run: Any) -> Redactor:
    """The redactor the run's store writes through (its contract's ``memory.exclude``)."""
    return redactor_for(run, run.contract.memory.exclude)


def describe_error(exc: BaseException) -> str:
    """One line for an error shown in a panel: the message of the lab's own and of argument errors,
    the exception's type too for anything else (a proposer's RuntimeError, an OSError)."""
    if isinstance(exc, KeyError) and exc.args:
        return str(exc.args[0])  # str(KeyError) wraps the message in quotes
    if isinstance(exc, (HarnessLabError, ValueError)):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


def newer(trace: Sequence[Any], last: int, attr: str) -> list[Any]:
    """The entries of a run's trace (``events`` by ``seq``, ``records`` by ``step``) numbered after
    ``last``. Not by list length: a run with a store trims both lists in place (the rest is in the
    store), so a length can shrink and grow back past what a panel already read."""
    out = []
    for entry in reversed(trace):
        if getattr(entry, attr) <= last:
            break
        out.append(entry)
    out.reverse()
    return out


def close_widgets(*roots: w.Widget) -> None:
    """Close ``roots`` and every widget they hold (children, layouts, styles): ipywidgets keeps each
    open widget in a process-wide registry, and a button's click handler keeps its dashboard alive."""
    stack, seen = list(roots), set()
    while stack:
        widget = stack.pop()
        if id(widget) in seen:
            continue
        seen.add(id(widget))
        for name in widget.keys:
            value = getattr(widget, name, None)
            held = value if isinstance(value, (tuple, list)) else (value,)
            stack.extend(v for v in held if isinstance(v, w.Widget))
        widget.close()


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def html_table(header: Sequence[str], rows: Iterable[Sequence[object]], *, cls: str = "") -> str:
    """A plain HTML table; cell values are escaped (``str`` of each value)."""
    head = "".join(f"<th style='text-align:left;padding:1px 6px'>{esc(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td style='padding:1px 6px;vertical-align:top'>{esc(c)}</td>" for c in row) + "</tr>"
        for row in rows
    )
    return f"<table class='hl-table {cls}'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


class Panel:
    """Base of every dashboard panel: ``widget`` to show, ``renders`` counts redraws."""

    name = "panel"
    title = "Panel"
    # Set by each subclass; not made here: a widget made and replaced stays in ipywidgets' registry.
    widget: w.Widget

    def __init__(self) -> None:
        self.renders = 0
        self._key: Any = _NEVER

    def key(self, run: Any) -> Hashable:
        raise NotImplementedError

    def draw(self, run: Any) -> None:
        raise NotImplementedError

    def update(self, run: Any, *, force: bool = False) -> bool:
        """Redraw if what this panel shows changed (or ``force``); True when it redrew."""
        key = self.key(run)
        if not force and key == self._key:
            return False
        self._key = key
        self.draw(run)
        self.renders += 1
        return True


_NEVER = object()
