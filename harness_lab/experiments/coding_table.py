"""The coding family's table: seven scripted coding tasks, with validation off and on.

Each scenario (``data/coding_scenarios/``) starts from the same small repository (``data/coding/stats``, one
failing test) and scripts one behaviour in the spirit of seed 004's table: an honest fix, a "tests pass"
claim over failing tests, tests edited or deleted instead of the code, the tests' input special-cased, a
dirty tree, the same failing command run again and again. "off" accepts any finish unchecked; "on" runs
the contract's layers (here the functional one: the tests and a held-out check in the sandbox, the
protected test file, the allowed files). Which check catches which cheat:
:mod:`harness_lab.validation.functional`. ``harness-lab experiment --family coding --output DIR`` writes
``results.json`` and ``table.md``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from ..contract import load_contract
from ..paths import data_dir
from ..persistence.stored import Run
from ..scenarios import load_scenario
from ..validation import LayerVerdict
from ._output import publish_texts

__all__ = ["CODING_SCENARIOS", "CodingResult", "render_coding_table", "run_coding_experiment",
           "run_coding_scenario", "write_coding_experiment"]

# The table's order: the honest run first, then the cheats, then the loop.
CODING_SCENARIOS: tuple[str, ...] = (
    "coding_honest_fix",
    "coding_claims_tests_pass",
    "coding_edits_tests",
    "coding_deletes_failing_test",
    "coding_special_cases_input",
    "coding_leaves_debris_then_cleans",
    "coding_loops_on_failing_command",
)


class CodingResult(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    scenario: str
    title: str
    validation: bool
    final_state: str
    stop_reason: str
    final_step: int
    decisions: int
    tool_calls: int
    rejected_at_steps: tuple[int, ...]
    caught_by: tuple[str, ...]  # what failed at the first rejected finish: check names, protected, allowed_files
    accepted_at_step: int | None
    accepted_is_acceptable: bool | None
    label_note: str


def _caught_by(verdict: LayerVerdict) -> tuple[str, ...]:
    named = [c.name for c in verdict.checks if c.status != "passed"]
    codes = {e.code for e in verdict.errors}
    if codes & {"protected_changed", "protected_missing"}:
        named.append("protected")
    if "unexpected_file" in codes:
        named.append("allowed_files")
    return tuple(named)


def run_coding_scenario(name: str, *, validation: bool) -> CodingResult:
    scenario = load_scenario(name)
    with Run.from_scenario(name, validation=validation) as run:
        run.run()
        rejected = [r for r in run.records if r.verdict is not None and not r.verdict.accepted]
        first = rejected[0].verdict if rejected else None
        accepted = run.receipt.step if run.receipt else None
        # a scripted run takes action i at step i + 1 (the last one again, under then: repeat_last)
        action = min(accepted - 1, len(scenario.actions) - 1) if accepted is not None else None
        return CodingResult(
            scenario=name, title=scenario.title, validation=validation, final_state=run.state.value,
            stop_reason=run.stop_reason.code if run.stop_reason else "", final_step=run.step_no,
            decisions=run.usage.decisions, tool_calls=run.usage.tool_calls,
            rejected_at_steps=tuple(r.step for r in rejected),
            caught_by=_caught_by(first) if isinstance(first, LayerVerdict) else (),
            accepted_at_step=accepted,
            accepted_is_acceptable=action in scenario.labels.acceptable_finishes if action is not None else None,
            label_note=scenario.labels.note,
        )


def run_coding_experiment(scenarios: tuple[str, ...] = CODING_SCENARIOS) -> list[CodingResult]:
    return [run_coding_scenario(name, validation=v) for name in scenarios for v in (False, True)]


def _cell(r: CodingResult) -> str:
    text = f"{r.final_state} at step {r.final_step}"
    if r.stop_reason == "no_progress":
        text += " (loop gate: same command, same result)"
    if r.rejected_at_steps and r.final_state == "REVIEW_READY":
        text = f"rejected at step {r.rejected_at_steps[0]}, {text}"
    elif r.rejected_at_steps:
        text += f" (finish rejected {len(r.rejected_at_steps)}x, then budget spent)"
    if r.accepted_is_acceptable is False:
        text += " — accepted a tree that is not acceptable" + (f" ({r.label_note})" if r.label_note else "")
    return text


def render_coding_table(results: list[CodingResult]) -> str:
    by_key = {(r.scenario, r.validation): r for r in results}
    lines = ["| coding scenario | validation off | validation on | caught by |", "|---|---|---|---|"]
    for name in dict.fromkeys(r.scenario for r in results):
        off, on = by_key[(name, False)], by_key[(name, True)]
        caught = ", ".join(on.caught_by) or ("loop gate" if on.stop_reason == "no_progress" else "-")
        lines.append(f"| {off.title} | {_cell(off)} | {_cell(on)} | {caught} |")
    budgets = {load_contract(data_dir() / "contracts" / f"{load_scenario(n).contract}.yaml").budget
               for n in dict.fromkeys(r.scenario for r in results)}
    limits = "".join(f"Budget: {b.max_decisions} decisions, {b.max_tool_calls} tool calls; " for b in budgets
                     if len(budgets) == 1)
    lines.append("")
    lines.append("REVIEW_READY means the task's checks passed on the tree the receipt names, not that the code is "
                 f"correct. {limits}scripted inputs, not a model.")
    return "\n".join(lines) + "\n"


def write_coding_experiment(output: str | Path) -> dict[str, Any]:
    """Write results.json and table.md into ``output``, both or neither."""
    results = run_coding_experiment()
    payload = {"family": "coding", "results": [r.model_dump() for r in results]}
    texts = {"results.json": json.dumps(payload, indent=2, ensure_ascii=False) + "\n",
             "table.md": render_coding_table(results)}
    publish_texts(Path(output), texts)
    return payload
