"""The layered context L0-L5 exactly as the proposer will see it next.

Readable at 1280 px: the item's metadata sits in one narrow column and the text column takes the
rest of the panel's width (the panel spans the dashboard). A long text shows its opening cut at a
word and opens in full on a click (an HTML ``<details>``, no kernel round trip); an L5 reference
opens the ref's stored text the same way; anomalies are highlighted. :func:`context_html` draws any
view, so the timeline shows a past step's context with the same table.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

import ipywidgets as w

from harness_lab.context import Layer

from ._panel import Panel, esc, redactor

__all__ = ["ContextPanel", "context_html", "context_rows", "excerpt"]

_EXCERPT = 90
_OPENING = 240  # characters of a long text shown before it is opened
_REF_SHOWN = 20_000  # a stored output larger than this opens cut, with a note (the page stays light)


def excerpt(text: str, limit: int = _EXCERPT) -> str:
    """``text`` on one line, cut at the last word boundary before ``limit`` (never mid-word) with "…"."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    cut = flat[: limit - 1]
    space = cut.rfind(" ")
    return (cut[:space] if space > limit // 2 else cut).rstrip() + " …"


def context_rows(view: Any, redact: Callable[[str], str] | None = None) -> list[tuple[str, str, int, str, int, str, str]]:
    """(layer, id, tokens, source, round, flags, excerpt) per item of a context view, in view order;
    each text passed through ``redact`` before it is cut (a cut secret no pattern recognises)."""
    rows = []
    for item in view.items:
        text = item.text if redact is None else redact(item.text)
        rows.append((item.layer.name, item.id, item.tokens, item.source, item.round, ", ".join(_flags(item)),
                     excerpt(text)))
    return rows


def _flags(item: Any) -> list[str]:
    flags = [item.freshness]
    if item.status != "current":
        flags.append(item.status)
    flags += [f for f, on in (("pinned", item.pinned), ("anomaly", item.anomaly)) if on]
    if item.ref_id:
        flags.append(f"ref {item.ref_id}")
    return flags


def _text_cell(text: str) -> str:
    """The whole text, wrapped; a long one opens from its opening line (full text on demand)."""
    if len(text) <= _OPENING and "\n" not in text.strip():
        return f"<span class='hl-ctx-text'>{esc(text)}</span>"
    return (f"<details class='hl-ctx-more'><summary class='hl-ctx-text'>{esc(excerpt(text, _OPENING))}</summary>"
            f"<pre class='hl-ctx-full' style='white-space:pre-wrap;overflow-wrap:anywhere;margin:2px 0'>"
            f"{esc(text)}</pre></details>")


def _ref_cell(ref_id: str, ref: Callable[[str], str] | None) -> str:
    if ref is None:
        return ""
    try:
        stored = ref(ref_id)
    except Exception as exc:  # an unknown or unloadable ref is shown as such, not raised into the page
        return f"<div class='hl-ref'><i>{esc(ref_id)}: not readable here ({esc(type(exc).__name__)}: {esc(exc)})</i></div>"
    more = (f"<div><i>{len(stored) - _REF_SHOWN} more characters: read_ref('{esc(ref_id)}', {_REF_SHOWN})</i></div>"
            if len(stored) > _REF_SHOWN else "")
    return (f"<details class='hl-ref'><summary>open {esc(ref_id)} ({len(stored)} characters stored)</summary>"
            f"<pre style='white-space:pre-wrap;overflow-wrap:anywhere;margin:2px 0'>{esc(stored[:_REF_SHOWN])}</pre>"
            f"{more}</details>")


def context_html(view: Any, redact: Callable[[str], str], ref: Callable[[str], str] | None = None) -> str:
    """A context view as a table whose text column takes most of the width: every item's full text
    (opened on demand), its L5 reference's stored text (``ref(ref_id)``, passed through ``redact``),
    anomalies highlighted."""
    sizes = " · ".join(
        f"{layer.name}: {len(items)} items / {sum(i.tokens for i in items)} tok"
        for layer in Layer if (items := view.by_layer(layer))
    )
    over = " <b style='color:#c62828'>over budget</b>" if view.over_budget else ""
    rows = []
    for item in view.items:
        flags = ", ".join(_flags(item))
        style = " style='background:#fff3e0'" if item.anomaly else ""
        anomaly = " <b class='hl-anomaly' style='color:#c62828'>anomaly</b>" if item.anomaly else ""
        refs = _ref_cell(item.ref_id, None if ref is None else (lambda r: redact(ref(r)))) if item.ref_id else ""
        rows.append(
            f"<tr class='hl-ctx-item{' hl-ctx-anomaly' if item.anomaly else ''}'{style}>"
            f"<td class='hl-ctx-meta' style='padding:1px 6px;vertical-align:top;white-space:nowrap'>"
            f"<b>{esc(item.layer.name)}</b> {esc(item.id)}{anomaly}<br><small>{item.tokens} tok · {esc(item.source)} "
            f"r{item.round}<br>{esc(flags)}</small></td>"
            f"<td class='hl-ctx-text-col' style='padding:1px 6px;vertical-align:top;overflow-wrap:anywhere'>"
            f"{_text_cell(redact(item.text))}{refs}</td></tr>")
    return (f"<div class='hl-context'><div>{view.total_tokens} / {view.budget_tokens} tokens{over}; {esc(sizes)}</div>"
            "<table class='hl-table hl-context-table' style='width:100%;table-layout:fixed;border-collapse:collapse'>"
            "<colgroup><col style='width:17em'><col></colgroup>"
            "<thead><tr><th style='text-align:left;padding:1px 6px'>item</th>"
            "<th style='text-align:left;padding:1px 6px'>text</th></tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table></div>")


class ContextPanel(Panel):
    name = "context"
    title = "Context (next view)"

    def __init__(self) -> None:
        super().__init__()
        self.html = w.HTML(layout=w.Layout(width="100%"))
        self.widget = self.html
        self._view: Any = None

    def key(self, run: Any) -> Hashable:
        # The manager caches its view: the same object means nothing changed. Holding the view keeps
        # its id from being reused by another object.
        self._view = run.context.view()
        return (id(self._view), id(run.context))

    def draw(self, run: Any) -> None:
        self.html.value = context_html(self._view, redactor(run).text, run.context.read_ref)
