"""Budgets as seed 003 gives them (issue 16, item 7): contracts carry a token budget and a wall-clock
limit by default, scripted scenarios never reach them by accident, and a shipped scenario shows the 80%
token warning and then the token stop."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness_lab import FakeClock, Run, RunState
from harness_lab.contract import Budget, ControlContract, Goal, load_contract
from harness_lab.paths import data_dir
from harness_lab.scenarios import list_scenarios, load_scenario

WARNING_SCENARIO = "keeps_reading_after_budget_warning"


def _warnings(run: Run) -> list[tuple[int, str]]:
    return [(r.step, e.message) for r in run.records for e in r.events if e.kind == "note" and e.topic == "budget_warning"]


def test_contracts_carry_a_token_budget_and_a_wall_clock_limit_by_default() -> None:
    assert (Budget().max_tokens, Budget().wall_clock_seconds) == (20_000, 600.0)
    bare = ControlContract(name="bare", goal=Goal(text="a goal"))  # a contract that names no budget
    assert (bare.budget.max_tokens, bare.budget.wall_clock_seconds) == (20_000, 600.0)
    shipped = load_contract(data_dir() / "contracts" / "report_task.yaml")
    assert (shipped.budget.max_tokens, shipped.budget.wall_clock_seconds) == (20_000, 600.0)
    lifted = shipped.with_budget(max_tokens=None, wall_clock_seconds=None)  # still possible, on purpose
    assert (lifted.budget.max_tokens, lifted.budget.wall_clock_seconds) == (None, None)


def test_a_contract_file_can_lift_them_with_null(tmp_path: Path) -> None:
    text = (data_dir() / "contracts" / "report_task.yaml").read_text(encoding="utf-8")
    text = text.replace("max_tokens: 20000", "max_tokens: null").replace("wall_clock_seconds: 600", "wall_clock_seconds: null")
    (tmp_path / "open.yaml").write_text(text, encoding="utf-8")
    budget = load_contract(tmp_path / "open.yaml").budget
    assert (budget.max_tokens, budget.wall_clock_seconds) == (None, None)


@pytest.mark.parametrize("name", [n for n in list_scenarios() if n != WARNING_SCENARIO])
@pytest.mark.parametrize("validation", [False, True])
def test_no_other_shipped_scenario_comes_near_its_token_budget(name: str, validation: bool) -> None:
    """The defaults are far from what a scripted run spends: no warning, no token or clock stop."""
    with Run.from_scenario(name, validation=validation, clock=FakeClock()) as run:
        run.run()
        budget = run.contract.budget
        assert budget.max_tokens is not None and budget.wall_clock_seconds is not None
        assert not _warnings(run)
        assert run.usage.tokens < 0.5 * budget.max_tokens, "less than half the budget: the default is not tight"
        assert run.stop_reason is not None and run.stop_reason.code not in ("token_budget", "wall_clock")


def test_the_shipped_warning_scenario_warns_once_at_80_percent_then_stops_on_the_token_budget() -> None:
    assert load_scenario(WARNING_SCENARIO).contract == "report_task_tight_tokens"
    with Run.from_scenario(WARNING_SCENARIO, clock=FakeClock()) as run:
        limit = run.contract.budget.max_tokens
        assert limit == 3800
        run.run()
        ((step, message),) = _warnings(run)  # exactly one warning
        assert step == 6
        tokens = {r.step: r.usage.tokens for r in run.records}
        assert tokens[5] < 0.8 * limit <= tokens[6] < limit, "the first decision at or over 80%, with room left"
        assert re.fullmatch(rf"budget warning: {tokens[6]}/{limit} tokens used \(\d+%\); converge and finish", message)
        # the warning reaches the model: it is feedback in the context, once
        assert run.context.view().render().count("converge and finish") == 1
        # decision 7 still runs (the budget is not spent); decision 8 is refused before the proposer is asked
        assert run.records[6].decision.verdict == "execute"
        last = run.records[-1]
        assert last.step == 8 and last.proposal is None and last.decision.verdict == "exhaust"
        assert run.state is RunState.EXHAUSTED
        assert run.stop_reason is not None and run.stop_reason.code == "token_budget"
        assert run.usage.tokens >= limit
        # the token budget, not the other budgets, is what stopped it; the draft was written, never accepted
        assert run.usage.decisions < run.contract.budget.max_decisions
        assert run.usage.tool_calls < run.contract.budget.max_tool_calls
        assert run.receipt is None and (run.workspace / "report.md").is_file()
