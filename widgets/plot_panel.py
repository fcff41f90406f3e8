"""A matplotlib plot of budget use over steps (an Agg figure rendered to PNG; no pyplot state).

Steps are integers on the x axis, an empty run still draws steps 0-1, and a fork's plot shows its
parent's history up to the fork point (faded) before its own steps."""

from __future__ import annotations

import io
from collections.abc import Hashable, Sequence
from typing import Any

import ipywidgets as w

from ._panel import Panel, newer
from .budget_panel import enforced_budget

__all__ = ["PlotPanel", "budget_figure", "budget_series"]


def budget_series(run: Any, records: Sequence[Any] | None = None) -> dict[str, list[float]]:
    """Per step: the fraction of each budget used after that step (tokens only when limited), for
    ``records`` (default: the step records the run holds)."""
    b = enforced_budget(run)
    records = run.records if records is None else records
    series = {
        "step": [float(r.step) for r in records],
        "decisions": [_share(r.usage.decisions, b.max_decisions) for r in records],
        "tool calls": [_share(r.usage.tool_calls, b.max_tool_calls) for r in records],
    }
    if b.max_tokens is not None:
        series["tokens"] = [_share(r.usage.tokens, b.max_tokens) for r in records]
    return series


def _share(used: int, limit: int) -> float:
    return used / limit if limit else 1.0  # a limit cut to 0 is spent


def budget_figure(run: Any) -> Any:
    """A matplotlib Figure of :func:`budget_series`; built without pyplot, so no backend is touched."""
    from matplotlib.figure import Figure  # imported here: importing the widgets stays fast

    fig = Figure(figsize=(5.0, 2.4), dpi=80)
    ax = fig.add_subplot()
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    series = budget_series(run)
    for name, values in series.items():
        if name != "step":
            ax.step(series["step"], values, where="post", label=name)
    ax.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
    ax.set_xlabel("step")
    ax.set_ylabel("fraction of budget")
    ax.set_ylim(0, 1.1)
    ax.set_xlim(0, max(series["step"] or [1.0]) + 0.5)  # an empty run: steps 0-1, not matplotlib's -0.05..0.05
    ax.legend(loc="upper left", fontsize="small")
    fig.tight_layout()
    return fig


class PlotPanel(Panel):
    """Keeps one figure and moves its lines' data on each redraw (rebuilding a figure costs ~6x)."""

    name = "plot"
    title = "Budget over steps"

    def __init__(self, parent: dict[str, list[float]] | None = None) -> None:
        super().__init__()
        # a fork's parent's series up to the fork point (budget_series of its records), drawn faded
        self.parent = parent or {}
        self.image = w.Image(format="png", layout=w.Layout(width="400px"))
        self.widget = self.image
        self._fig: Any = None
        self._lines: dict[str, Any] = {}
        # the points drawn so far: a stored run keeps only its last records in memory
        self._records: Any = None
        self._series: dict[str, list[float]] = {}

    def key(self, run: Any) -> Hashable:
        # the last step, not the list's length: a stored run trims its records in place
        return (id(run.records), run.records[-1].step if run.records else 0)

    def _figure(self, run: Any) -> None:
        from matplotlib.figure import Figure

        fig = Figure(figsize=(5.0, 2.4), dpi=72)
        fig.subplots_adjust(left=0.12, right=0.98, bottom=0.2, top=0.95)  # fixed: no tight_layout per draw
        ax = fig.add_subplot()
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
        for name in budget_series(run):
            if name != "step":
                (self._lines[name],) = ax.step([], [], where="post", label=name)
                if self.parent.get(name):
                    ax.step(self.parent["step"], self.parent[name], where="post", color=self._lines[name].get_color(),
                            alpha=0.35, linestyle=":", label=f"{name} (parent)" if name == "decisions" else None)
        if self.parent.get("step"):
            ax.axvline(self.parent["step"][-1], color="grey", linewidth=0.8, linestyle=":")
        ax.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
        ax.set_xlabel("step")
        ax.set_ylabel("fraction of budget")
        ax.set_ylim(0, 1.1)
        ax.legend(loc="upper left", fontsize="small")
        self._fig, self._ax = fig, ax

    def draw(self, run: Any) -> None:
        if self._fig is None:
            self._figure(run)
        if run.records is not self._records:
            self._records, self._series = run.records, {}
        last = self._series["step"][-1] if self._series.get("step") else 0
        for name, values in budget_series(run, newer(run.records, int(last), "step")).items():
            self._series.setdefault(name, []).extend(values)
        series = self._series
        for name, line in self._lines.items():
            line.set_data(series["step"], series.get(name, []))
        # by step number, not by count: a resumed or forked run's first step is not 1
        steps = (self.parent.get("step") or []) + series["step"] or [0.0]
        self._ax.set_xlim(min(0.0, steps[0] - 1), max(steps[-1], 1) + 0.5)
        buf = io.BytesIO()
        self._fig.savefig(buf, format="png")
        self.image.value = buf.getvalue()
