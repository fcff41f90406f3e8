"""Budget gauges: decisions, tool calls, tokens and wall clock against the contract's limits."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import ipywidgets as w

from ._panel import Panel

__all__ = ["BudgetPanel", "enforced_budget", "gauges"]


def enforced_budget(run: Any) -> Any:
    """The budget the run's gates enforce: the contract's, unless the scheduler cut it mid-run
    (the ``budget_squeeze`` fault, a resumed run's gate state)."""
    gates = getattr(run, "gates", None)
    return getattr(gates, "budget", None) or run.contract.budget


def gauges(run: Any) -> list[tuple[str, float, float | None]]:
    """(name, used, limit or None) for each budget the gates enforce. While a human gate waits, the
    wall clock is read now (the wait is charged: ``approve()`` checks it), not as the last step left it;
    otherwise the clock is not read (a ticking clock would move the run's time)."""
    b, u = enforced_budget(run), run.usage
    elapsed = run.gates.elapsed() if run.waiting is not None else u.elapsed_s
    return [
        ("decisions", float(u.decisions), float(b.max_decisions)),
        ("tool calls", float(u.tool_calls), float(b.max_tool_calls)),
        ("tokens", float(u.tokens), None if b.max_tokens is None else float(b.max_tokens)),
        ("wall clock s", round(elapsed, 1), None if b.wall_clock_seconds is None else float(b.wall_clock_seconds)),
    ]


class BudgetPanel(Panel):
    name = "budget"
    title = "Budgets"

    def __init__(self) -> None:
        super().__init__()
        self.bars: dict[str, w.FloatProgress] = {}
        self.labels: dict[str, w.Label] = {}
        rows = []
        for name in ("decisions", "tool calls", "tokens", "wall clock s"):
            self.bars[name] = w.FloatProgress(min=0.0, max=1.0, layout=w.Layout(width="180px"))
            self.labels[name] = w.Label()
            rows.append(w.HBox([w.Label(name, layout=w.Layout(width="90px")), self.bars[name], self.labels[name]]))
        self.widget = w.VBox(rows)

    def key(self, run: Any) -> Hashable:
        return tuple(gauges(run))

    def draw(self, run: Any) -> None:
        for name, used, limit in gauges(run):
            bar = self.bars[name]
            if limit is not None:  # a limit of 0 is a spent budget, not "no limit"
                bar.value = min(used / limit, 1.0) if limit else 1.0
                bar.bar_style = "danger" if used >= limit else "warning" if used >= 0.8 * limit else "info"
                self.labels[name].value = f"{used:g} / {limit:g}"
            else:
                bar.value, bar.bar_style = 0.0, ""
                self.labels[name].value = f"{used:g} (no limit)"
