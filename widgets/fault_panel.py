"""The fault picker: inject any fault of the catalogue into the next step (``run.inject(name)``)."""

from __future__ import annotations

import importlib
from collections.abc import Hashable
from typing import Any

import ipywidgets as w

from ._panel import Panel, esc

__all__ = ["FaultPanel", "fault_names"]


def fault_names() -> list[str]:
    """Names in the runtime's fault catalogue, or [] while the catalogue does not exist."""
    try:
        faults = importlib.import_module("harness_lab.faults")
    except ImportError:
        return []
    for attr in ("FAULTS", "CATALOGUE", "CATALOG"):
        table = getattr(faults, attr, None)
        if table is not None:
            return sorted(str(name) for name in table)
    names = getattr(faults, "fault_names", None)
    return sorted(names()) if callable(names) else []


class FaultPanel(Panel):
    name = "faults"
    title = "Faults"

    def __init__(self) -> None:
        super().__init__()
        self.names = fault_names()
        self.picker = w.Dropdown(options=self.names, description="fault", layout=w.Layout(width="320px"))
        self.inject_button = w.Button(description="Inject", button_style="danger", disabled=True)
        self.inject_button.add_class("hl-inject")
        self.html = w.HTML()
        self.widget = w.VBox([w.HBox([self.picker, self.inject_button]), self.html])
        self.injected: list[str] = []

    def key(self, run: Any) -> Hashable:
        return (hasattr(run, "inject"), run.state.terminal, tuple(self.injected))

    def draw(self, run: Any) -> None:
        ready = bool(self.names) and hasattr(run, "inject") and not run.state.terminal
        self.inject_button.disabled = not ready
        if not self.names or not hasattr(run, "inject"):
            self.html.value = "<i>the fault catalogue is not available in this runtime (run.inject)</i>"
        else:
            done = ", ".join(self.injected) or "none"
            self.html.value = f"<div class='hl-faults'>{len(self.names)} faults; injected so far: {esc(done)}</div>"
