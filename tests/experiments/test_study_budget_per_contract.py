"""A study's budget flags replace those limits in each scenario's own contract: the shipped scenarios
no longer share one contract (keeps_reading_after_budget_warning brings a tight token budget), and
`--max-decisions` over them was refused as "the scenarios use different contracts"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness_lab.cli import main
from harness_lab.experiments.study import study_tasks

BOTH = ["conforming_report", "keeps_reading_after_budget_warning"]


def test_budget_limits_replace_each_scenarios_own_limits_and_keep_the_rest() -> None:
    tasks = study_tasks(["base"], BOTH, 1, budget={"max_decisions": 4})
    budgets = {t.scenario.id: t.contract.budget for t in tasks}
    assert {b.max_decisions for b in budgets.values()} == {4}
    assert budgets["conforming_report"].max_tokens == 20_000
    assert budgets["keeps_reading_after_budget_warning"].max_tokens == 3800  # its own contract's
    assert budgets["keeps_reading_after_budget_warning"].max_tool_calls == 10


def test_the_study_command_takes_budget_flags_over_scenarios_with_their_own_contracts(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "study"
    assert main(["study", "--groups", "base", "--scenarios", ",".join(BOTH), "--seeds", "1", "--no-plots", "--quiet",
                 "--max-decisions", "4", "--output", str(out)]) == 0
    data = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert data["budget"] == {"per_scenario": True}
    assert all(o["decisions"] <= 4 for o in data["outcomes"])
    capsys.readouterr()
