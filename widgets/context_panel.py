"""The layered context L0-L5 exactly as the proposer will see it next."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

import ipywidgets as w

from harness_lab.context import Layer

from ._panel import Panel, esc, html_table, redactor

__all__ = ["ContextPanel", "context_rows"]

_EXCERPT = 90


def context_rows(view: Any, redact: Callable[[str], str] | None = None) -> list[tuple[str, str, int, str, int, str, str]]:
    """(layer, id, tokens, source, round, flags, excerpt) per item of a context view, in view order;
    each text passed through ``redact`` before it is cut (a cut secret no pattern recognises)."""
    rows = []
    for item in view.items:
        flags = [item.freshness]
        if item.status != "current":
            flags.append(item.status)
        flags += [f for f, on in (("pinned", item.pinned), ("anomaly", item.anomaly)) if on]
        if item.ref_id:
            flags.append(f"ref {item.ref_id}")
        text = " ".join((item.text if redact is None else redact(item.text)).split())
        rows.append((item.layer.name, item.id, item.tokens, item.source, item.round, ", ".join(flags),
                     text if len(text) <= _EXCERPT else text[: _EXCERPT - 1] + "…"))
    return rows


class ContextPanel(Panel):
    name = "context"
    title = "Context (next view)"

    def __init__(self) -> None:
        super().__init__()
        self.html = w.HTML()
        self.widget = self.html
        self._view: Any = None

    def key(self, run: Any) -> Hashable:
        # The manager caches its view: the same object means nothing changed. Holding the view keeps
        # its id from being reused by another object.
        self._view = run.context.view()
        return (id(self._view), id(run.context))

    def draw(self, run: Any) -> None:
        view = self._view
        sizes = " · ".join(
            f"{layer.name}: {len(items)} items / {sum(i.tokens for i in items)} tok"
            for layer in Layer if (items := view.by_layer(layer))
        )
        over = " <b style='color:#c62828'>over budget</b>" if view.over_budget else ""
        self.html.value = (
            f"<div class='hl-context'><div>{view.total_tokens} / {view.budget_tokens} tokens{over}; {esc(sizes)}</div>"
            + html_table(("layer", "id", "tokens", "source", "round", "freshness / flags", "text"), context_rows(view, redactor(run).text))
            + "</div>"
        )
