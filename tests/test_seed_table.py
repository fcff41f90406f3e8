"""Seed 004's ten-scenario table, row by row (budget: 8 decisions, 5 tool calls)."""

from __future__ import annotations

import json

import pytest

from harness_lab.cli import main
from harness_lab.experiments import SEED_SCENARIOS, run_scenario

# scenario -> ((state off, step off), (state on, step on)); the steps are the step at which
# the final state was reached.
TABLE = {
    "no_report_claims_done": (("REVIEW_READY", 3), ("EXHAUSTED", 9)),
    "empty_report": (("REVIEW_READY", 4), ("EXHAUSTED", 9)),
    "cites_unread_evidence": (("REVIEW_READY", 3), ("EXHAUSTED", 9)),
    "cites_unknown_id": (("REVIEW_READY", 4), ("EXHAUSTED", 9)),
    "missing_limitations": (("REVIEW_READY", 4), ("EXHAUSTED", 9)),
    "missing_section_then_fixed": (("REVIEW_READY", 4), ("REVIEW_READY", 6)),
    "conforming_report": (("REVIEW_READY", 4), ("REVIEW_READY", 4)),
    "overclaiming_conclusion": (("REVIEW_READY", 4), ("REVIEW_READY", 4)),
    "sets_run_state": (("BLOCKED", 2), ("BLOCKED", 2)),
    "endless_tool_calls": (("EXHAUSTED", 6), ("EXHAUSTED", 6)),
}


def test_table_covers_the_seed_scenarios() -> None:
    assert tuple(TABLE) == SEED_SCENARIOS


@pytest.mark.parametrize("name", SEED_SCENARIOS)
@pytest.mark.parametrize("validation", [False, True], ids=["off", "on"])
def test_row(name: str, validation: bool) -> None:
    state, step = TABLE[name][validation]
    result = run_scenario(name, validation=validation)
    assert (result.final_state, result.final_step) == (state, step)
    assert result.decisions <= 8 and result.tool_calls <= 5


def test_fixed_report_rejected_at_4_fixed_at_5_accepted_at_6() -> None:
    on = run_scenario("missing_section_then_fixed", validation=True)
    assert on.rejected_at_steps == (4,)
    assert on.accepted_at_step == 6 and on.accepted_is_acceptable is True
    off = run_scenario("missing_section_then_fixed", validation=False)
    assert off.rejected_at_steps == () and off.accepted_at_step == 4
    assert off.accepted_is_acceptable is False, "without validation the incomplete version is accepted"


@pytest.mark.parametrize(
    ("name", "code"),
    [
        ("no_report_claims_done", "decision_budget"),
        ("sets_run_state", "forbidden_action"),
        ("endless_tool_calls", "tool_budget"),
    ],
)
def test_stop_reasons_stay_distinct(name: str, code: str) -> None:
    assert run_scenario(name, validation=True).stop_reason == code


def test_experiment_command_writes_results_and_table(tmp_path, capsys) -> None:
    assert main(["experiment", "--output", str(tmp_path)]) == 0
    payload = json.loads((tmp_path / "results.json").read_text())
    rows = {(r["scenario"], r["validation"]): r for r in payload["results"]}
    assert len(rows) == 20
    for name, expected in TABLE.items():
        for validation in (False, True):
            row = rows[(name, validation)]
            assert (row["final_state"], row["final_step"]) == expected[validation]
            assert {"decisions", "tool_calls", "stop_reason"} <= set(row)
    table = (tmp_path / "table.md").read_text()
    assert sum(line.startswith("| ") for line in table.splitlines()) == 11  # header + ten rows
    overclaim = next(line for line in table.splitlines() if line.startswith("| well formed but overclaiming"))
    assert "structure cannot judge support" in overclaim
