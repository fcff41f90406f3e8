"""Plots of a study (PNG and SVG). matplotlib is an optional extra (``harness-lab[plot]``).

It is imported inside :func:`plot_study`, never at module import, so the runtime stays free of it.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import HarnessLabError
from .study import StudyResult

__all__ = ["plot_study"]


def plot_study(result: StudyResult, output: str | Path, *, stem: str = "study") -> list[Path]:
    """Draw outcome rates and costs per group; return the PNG and SVG paths written."""
    try:
        # A bare Figure needs no pyplot and no backend switch, so a notebook's inline plots stay inline.
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise HarnessLabError("plots need matplotlib: pip install 'harness-lab[plot]'") from exc

    groups = [s.group for s in result.summaries]
    rates = {
        "completion": [s.completed / s.runs for s in result.summaries],
        "false accepts": [s.false_accepts / s.runs for s in result.summaries],
        "false rejects": [s.false_rejects / s.runs for s in result.summaries],
        "exhaustions": [s.exhaustions / s.runs for s in result.summaries],
    }
    costs = {
        "decisions": [s.decisions for s in result.summaries],
        "tool calls": [s.tool_calls for s in result.summaries],
        "latency (steps)": [s.latency_steps for s in result.summaries],
        "reviews": [s.reviews for s in result.summaries],
    }
    fig = Figure(figsize=(15, 4.5))
    left, middle, right = fig.subplots(1, 3)
    _bars(left, groups, rates, "share of runs")
    left.set_ylim(0, 1)
    left.set_title("outcomes (ground truth: fixed labels)")
    _bars(middle, groups, costs, "mean per run")
    middle.set_title("cost and latency")
    right.bar(groups, [s.tokens for s in result.summaries], color="tab:gray")
    right.set_ylabel("mean tokens per run")
    right.set_title("tokens")
    note = f"{len(result.scenarios)} scenarios x {result.seeds} seeds, same budget per group; scripted inputs, not a model"
    fig.suptitle(note, fontsize=9)
    fig.tight_layout()
    out = Path(output)
    paths = [out / f"{stem}.png", out / f"{stem}.svg"]
    for path in paths:
        fig.savefig(path, dpi=120)
    return paths


def _bars(ax: object, groups: list[str], series: dict[str, list[float]], ylabel: str) -> None:
    width = 0.8 / len(series)
    for i, (name, values) in enumerate(series.items()):
        xs = [g + (i - (len(series) - 1) / 2) * width for g in range(len(groups))]
        ax.bar(xs, values, width, label=name)  # type: ignore[attr-defined]
    ax.set_xticks(range(len(groups)), groups)  # type: ignore[attr-defined]
    ax.set_ylabel(ylabel)  # type: ignore[attr-defined]
    ax.legend(fontsize=8)  # type: ignore[attr-defined]
