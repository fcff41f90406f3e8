"""The study's written output: one table per study, each metric's definition, per-scenario detail."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ._output import publish
from .metrics import METRIC_DEFINITIONS
from .study import GROUPS, StudyResult

__all__ = ["render_scenario_table", "render_study_table", "study_payload", "write_study"]

_PLOTS = ("study.png", "study.svg")  # what plot_study writes with its default stem


def _pct(part: int, whole: int) -> str:
    return f"{part}/{whole} ({100 * part / whole:.0f}%)" if whole else "0/0"


def render_study_table(result: StudyResult) -> str:
    cols = ["group", "runs", "completion", "attainable", "delivered", "false accepts", "false rejects",
            "decisions", "tool calls", "tokens", "reviews", "revisions", "latency (steps)", "wall ms", "exhaustions", "blocked"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for s in result.summaries:
        lines.append("| " + " | ".join([
            s.group, str(s.runs), _pct(s.completed, s.runs), str(s.attainable),
            _pct(s.delivered, s.runs), _pct(s.false_accepts, s.delivered), _pct(s.false_rejects, s.runs),
            f"{s.decisions:.2f}", f"{s.tool_calls:.2f}", f"{s.tokens:.0f}", f"{s.reviews:.2f}", f"{s.revisions:.2f}",
            f"{s.latency_steps:.2f}", f"{s.wall_ms:.1f}", str(s.exhaustions), str(s.blocked),
        ]) + " |")
    budget = ", ".join(f"{k}={v}" for k, v in result.budget.items() if v is not None)
    lines += [
        "",
        f"Same budget for every group: {budget}. {len(result.scenarios)} scenarios x {result.seeds} seeds "
        f"(seed 0 unperturbed, others perturbed at rate {result.noise}); semantic reviewer: {result.reviewer}.",
        "Ground truth: each scenario's labels (acceptable report bytes, fixed before any run), never a validator.",
        "Scripted inputs, not a model: this measures the harness's control flow, not how often a model gets it right.",
    ]
    lines += ["", "Groups:"]
    lines += [f"- {g}: {GROUPS[g].description}" for g in result.groups]
    lines += ["", "Definitions:"]
    lines += [f"- {name}: {text}" for name, text in METRIC_DEFINITIONS.items()]
    return "\n".join(lines) + "\n"


def render_scenario_table(result: StudyResult) -> str:
    """Per scenario and group: completed / false accepts / exhaustions over the seeds."""
    lines = ["| scenario | " + " | ".join(result.groups) + " |", "|---|" + "---|" * len(result.groups)]
    for name in result.scenarios:
        cells = []
        for g in result.groups:
            rows = [o for o in result.outcomes if o.scenario == name and o.group == g]
            cells.append(f"{sum(o.delivered_acceptable for o in rows)} ok / {sum(o.false_accept for o in rows)} FA / "
                         f"{sum(o.false_reject for o in rows)} FR / {sum(o.final_state == 'EXHAUSTED' for o in rows)} EX")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", f"Each cell over {result.seeds} seeds: ok = delivered an acceptable report, FA = false accept, "
                  "FR = false reject, EX = budget exhausted."]
    return "\n".join(lines) + "\n"


def study_payload(result: StudyResult) -> dict[str, Any]:
    data = result.model_dump(mode="json")
    data["definitions"] = dict(METRIC_DEFINITIONS)
    data["groups_described"] = {g: GROUPS[g].description for g in result.groups}
    return data


def write_study(result: StudyResult, output: str | Path, *, plots: bool = True) -> list[Path]:
    """Write results.json, table.md, scenarios.md and (if ``plots``) PNG + SVG plots, all or none."""
    texts = {
        "results.json": json.dumps(study_payload(result), indent=1, ensure_ascii=False) + "\n",
        "table.md": render_study_table(result),
        "scenarios.md": render_scenario_table(result),
    }

    def make(staging: Path) -> list[Path]:
        written = []
        for name, text in texts.items():
            written.append(staging / name)
            written[-1].write_text(text, encoding="utf-8")
        if plots:
            from .plots import plot_study

            written += plot_study(result, staging)
        return written

    return publish(Path(output), make, stale=() if plots else _PLOTS)
