"""The fault picker: inject any fault of the catalogue into the next step (``run.inject(name)``),
and the faults that fired with the harness's answer to each."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import ipywidgets as w

from harness_lab.faults import fault_catalogue

from ._panel import Panel, esc, html_table

__all__ = ["FaultPanel", "fault_names"]


def fault_names() -> list[str]:
    """The catalogue's fault names, in catalogue order."""
    return list(fault_catalogue())


class FaultPanel(Panel):
    name = "faults"
    title = "Faults"

    def __init__(self) -> None:
        super().__init__()
        catalogue = fault_catalogue()
        self.names = list(catalogue)
        self.docs = {name: type(fault).doc() for name, fault in catalogue.items()}
        self.picker = w.Dropdown(options=self.names, description="fault", layout=w.Layout(width="320px"))
        self.inject_button = w.Button(description="Inject", button_style="danger", disabled=True)
        self.doc = w.HTML()
        self.html = w.HTML()
        self.picker.observe(lambda _change: self._show_doc(), names="value")
        self.widget = w.VBox([w.HBox([self.picker, self.inject_button]), self.doc, self.html])
        self.injected: list[str] = []  # names armed through this view (the run's trace has every one)
        self._show_doc()

    def _show_doc(self) -> None:
        self.doc.value = f"<i>{esc(self.docs.get(self.picker.value or '', ''))}</i>"

    def key(self, run: Any) -> Hashable:
        return (run.state.terminal, getattr(run, "crashed", None), len(run.faults), tuple(self.injected))

    def draw(self, run: Any) -> None:
        # no step will come for a fault to strike: the run ended, or this run object crashed
        self.inject_button.disabled = run.state.terminal or getattr(run, "crashed", None) is not None
        fired = [(r.step, r.fault, r.effect, r.answer, r.state_after.value if r.state_after else "-")
                 for r in run.faults]
        armed = f"<div>armed from here: {esc(', '.join(self.injected))}</div>" if self.injected else ""
        self.html.value = ("<div class='hl-faults'>" + armed
                           + (html_table(("step", "fault", "effect", "harness answer", "state after"), fired)
                              if fired else "<i>no fault fired yet</i>") + "</div>")
