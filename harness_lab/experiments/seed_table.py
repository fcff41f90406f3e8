"""Seed 004's ten-scenario experiment: the same scripts with structural acceptance off and on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from ..contract import load_contract
from ..paths import data_dir
from ..persistence.stored import Run
from ..scenarios import load_scenario
from ._output import publish_texts

__all__ = ["SEED_SCENARIOS", "ScenarioResult", "render_table", "run_experiment", "run_scenario", "write_experiment"]

# The seed's table order.
SEED_SCENARIOS: tuple[str, ...] = (
    "no_report_claims_done",
    "empty_report",
    "cites_unread_evidence",
    "cites_unknown_id",
    "missing_limitations",
    "missing_section_then_fixed",
    "conforming_report",
    "overclaiming_conclusion",
    "sets_run_state",
    "endless_tool_calls",
)


class ScenarioResult(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    scenario: str
    title: str
    validation: bool
    final_state: str
    stop_reason: str
    stop_message: str
    decisions: int
    tool_calls: int
    final_step: int
    rejected_at_steps: tuple[int, ...]
    accepted_at_step: int | None
    accepted_is_acceptable: bool | None
    label_note: str


def run_scenario(name: str, *, validation: bool) -> ScenarioResult:
    scenario = load_scenario(name)
    with Run.from_scenario(name, validation=validation) as run:
        run.run()
        rejected = tuple(r.step for r in run.records if r.verdict is not None and not r.verdict.accepted)
        return ScenarioResult(
            scenario=name,
            title=scenario.title,
            validation=validation,
            final_state=run.state.value,
            stop_reason=run.stop_reason.code if run.stop_reason else "",
            stop_message=run.stop_reason.message if run.stop_reason else "",
            decisions=run.usage.decisions,
            tool_calls=run.usage.tool_calls,
            final_step=run.step_no,
            rejected_at_steps=rejected,
            accepted_at_step=run.receipt.step if run.receipt else None,
            accepted_is_acceptable=scenario.is_acceptable(run.accepted_bytes) if run.receipt else None,
            label_note=scenario.labels.note,
        )


def run_experiment(scenarios: tuple[str, ...] = SEED_SCENARIOS) -> list[ScenarioResult]:
    return [run_scenario(name, validation=v) for name in scenarios for v in (False, True)]


def _cell(r: ScenarioResult) -> str:
    text = f"{r.final_state} at step {r.final_step}"
    if r.rejected_at_steps and r.final_state == "REVIEW_READY":
        fixes = ", ".join(str(s + 1) for s in r.rejected_at_steps)
        text = f"rejected at step {', '.join(map(str, r.rejected_at_steps))}, fixed at step {fixes}, {text}"
    elif r.rejected_at_steps:
        text += f" (finish rejected {len(r.rejected_at_steps)}x, then budget spent)"
    if r.accepted_is_acceptable is False:
        text += " — accepted a report that is not acceptable" + (
            f" ({r.label_note})" if r.label_note else " (incomplete report passed unchecked)"
        )
    return text


def _budget(results: list[ScenarioResult]) -> dict[str, int]:
    """The decision and tool-call limits the scenarios' contracts set (one budget: the seed's table has one)."""
    root = data_dir()
    budgets = {load_contract(root / "contracts" / f"{load_scenario(n).contract}.yaml").budget
               for n in dict.fromkeys(r.scenario for r in results)}
    if not budgets:
        return {}
    if len(budgets) > 1:
        raise ValueError("the scenarios' contracts set different budgets; one table needs one budget")
    budget = budgets.pop()
    return {"max_decisions": budget.max_decisions, "max_tool_calls": budget.max_tool_calls}


def render_table(results: list[ScenarioResult]) -> str:
    by_key = {(r.scenario, r.validation): r for r in results}
    names = list(dict.fromkeys(r.scenario for r in results))
    lines = [
        "| scenario | validation off | validation on |",
        "|---|---|---|",
    ]
    for name in names:
        off, on = by_key[(name, False)], by_key[(name, True)]
        lines.append(f"| {off.title} | {_cell(off)} | {_cell(on)} |")
    budget = _budget(results)
    limits = f"Budget: {budget['max_decisions']} decisions, {budget['max_tool_calls']} tool calls; " if budget else ""
    lines.append("")
    lines.append(
        f"REVIEW_READY means the mechanical checks passed, not that the report is true. {limits}"
        "scripted inputs, not a model."
    )
    return "\n".join(lines) + "\n"


def write_experiment(output: str | Path) -> dict[str, Any]:
    """Write results.json and table.md into ``output``, both or neither."""
    results = run_experiment()
    payload = {"budget": _budget(results), "results": [r.model_dump() for r in results]}
    texts = {"results.json": json.dumps(payload, indent=2, ensure_ascii=False) + "\n", "table.md": render_table(results)}
    publish_texts(Path(output), texts)
    return payload
