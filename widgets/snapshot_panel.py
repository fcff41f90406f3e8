"""The snapshot timeline: each snapshot with its diff against the previous one; Roll back / Fork."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import ipywidgets as w

from ._panel import Panel, esc, html_table

__all__ = ["SnapshotPanel"]

_SHOWN = 40  # the newest rows shown; older ones stay selectable in the dropdown


def _diff_text(diff: Any) -> str:
    parts = [f"{sign}{p}" for sign, paths in (("+", diff.added), ("-", diff.removed), ("~", diff.changed)) for p in paths]
    return " ".join(parts) if parts else "no file change"


class SnapshotPanel(Panel):
    name = "snapshots"
    title = "Snapshots"

    def __init__(self) -> None:
        super().__init__()
        self.html = w.HTML()
        self.picker = w.Dropdown(options=[], description="snapshot", layout=w.Layout(width="320px"))
        self.rollback_button = w.Button(description="Roll back", button_style="warning", disabled=True)
        self.fork_button = w.Button(description="Fork", disabled=True)
        self.rollback_button.add_class("hl-rollback")
        self.fork_button.add_class("hl-fork")
        self.widget = w.VBox([self.html, w.HBox([self.picker, self.rollback_button, self.fork_button])])
        self._diffs: dict[tuple[str, str], str] = {}  # snapshots never change: a diff is computed once
        self.infos: list[Any] = []

    def key(self, run: Any) -> Hashable:
        self.infos = run.sandbox.snapshots()
        return (id(run.sandbox), tuple(i.id for i in self.infos), hasattr(run, "fork"))

    def diff(self, run: Any, a: str, b: str) -> str:
        if (a, b) not in self._diffs:
            self._diffs[(a, b)] = _diff_text(run.sandbox.diff(a, b))
        return self._diffs[(a, b)]

    def draw(self, run: Any) -> None:
        infos = self.infos
        rows = []
        start = max(0, len(infos) - _SHOWN)
        for n in range(start, len(infos)):
            info = infos[n]
            change = self.diff(run, infos[n - 1].id, info.id) if n else f"{info.files} files (first)"
            state = (info.run_state or {}).get("state", "-")
            rows.append((info.id, info.label, info.trigger or "on demand", state, info.files, change))
        more = f"<div>{start} older snapshots not shown</div>" if start else ""
        self.html.value = (f"<div class='hl-snapshots'>{len(infos)} snapshots{more}"
                           + html_table(("id", "label", "trigger", "run state", "files", "change vs previous"), rows)
                           + "</div>")
        options = [(f"{i.id} · {i.label}", i.id) for i in reversed(infos)]
        self.picker.options = options
        self.picker.value = options[0][1] if options else None
        self.rollback_button.disabled = not infos
        self.fork_button.disabled = not infos or not hasattr(run, "fork")
        self.fork_button.tooltip = "" if hasattr(run, "fork") else "fork needs Run.fork (the store work)"
        if not infos:
            self.html.value = f"<div class='hl-snapshots'>no snapshots yet {esc('(taken before irreversible steps and at gates)')}</div>"
