"""stop.success / stop.failure are one typed rule, read by the Run, the repair policy and the external loop."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from loophelpers import FINISH, GOOD, READ_A, READ_B, WRITE_GOOD, contract, make_run

from harness_lab import Run
from harness_lab.contract import ControlContract, Stop, load_contract
from harness_lab.errors import ConfigError
from harness_lab.loop.repair import RepairPolicy
from harness_lab.loop.scheduler import ExternalLoop
from harness_lab.loop.stop_rules import SAME_ROOT_CAUSE, AllChecksPass, SameRootCause, parse_failure
from harness_lab.paths import data_dir
from harness_lab.records.states import LoopState, RunState
from harness_lab.store import SQLiteStore

NO_LIMITS = GOOD.replace("## Limitations\nTest material only.\n", "")
BAD_1 = {"kind": "write_report", "text": NO_LIMITS}
BAD_2 = {"kind": "write_report", "text": NO_LIMITS + "\nAnother draft, the same missing section.\n"}
BAD_3 = {"kind": "write_report", "text": NO_LIMITS + "\nA third draft.\n"}
MISSING = "check failed: section_missing"


def _failure(rule: Any) -> ControlContract:
    base = contract()
    return base.model_copy(update={"stop": Stop.model_validate({**base.stop.model_dump(), "failure": rule})})


@pytest.mark.parametrize(("text", "times"), [
    ("same root cause failed twice", 2), ("Same root cause failed 3 times in a row.", 3),
    ("same root cause fails once", 1), ("同一根因连续失败两次", 2), ({"same_root_cause": 4}, 4),
])
def test_the_texts_and_the_structured_form_read_as_one_rule(text: Any, times: int) -> None:
    assert parse_failure(text) == SameRootCause(times=times)
    assert Stop.model_validate({"failure": text}).rules == (AllChecksPass(), SameRootCause(times=times))


@pytest.mark.parametrize(("field", "value", "message"), [
    ("failure", "when it feels wrong", "cannot read 'when it feels wrong' as a stop rule"),
    ("failure", "{same_root_cause: true}", "same_root_cause must be a whole number of failures, got True"),
    ("failure", "{same_root_cause: 0}", "same_root_cause must be at least 1 failure"),
    ("failure", "{same_cause: 2}", "a structured stop rule is {same_root_cause: N}"),
    ("success", "the user is happy", "cannot read 'the user is happy' as a success rule"),
])
def test_a_rule_no_one_can_read_is_one_line(tmp_path: Path, field: str, value: str, message: str) -> None:
    text = (data_dir() / "contracts" / "report_task.yaml").read_text(encoding="utf-8")
    start = f"  {field}: "
    line = next(line for line in text.splitlines() if line.startswith(start))
    bad = tmp_path / "c.yaml"
    bad.write_text(text.replace(line, start + value), encoding="utf-8")
    with pytest.raises(ConfigError, match=f"field stop.{field}: ") as caught:
        load_contract(bad)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_a_bare_run_stops_blocked_when_the_same_cause_fails_over_two_drafts(tmp_path: Path) -> None:
    # No rule acted in a bare run: a second draft failing on the same check went on to a third.
    run = make_run(tmp_path, [READ_A, READ_B, BAD_1, FINISH, BAD_2, FINISH, WRITE_GOOD, FINISH])
    assert run.run() is RunState.BLOCKED and run.step_no == 6
    assert run.stop_reason is not None and run.stop_reason.code == SAME_ROOT_CAUSE
    assert "same root cause failed twice in a row (check failed: section_missing)" in run.stop_reason.message
    assert run.failed_attempts.causes == [MISSING, MISSING]


def test_a_finish_repeated_on_unchanged_bytes_is_no_new_attempt(tmp_path: Path) -> None:
    # seed 004's table: the budget, not this rule, stops a run that claims done again and again
    run = make_run(tmp_path, [READ_A, READ_B, BAD_1, FINISH], contract_=contract(max_decisions=8))
    assert run.run() is RunState.EXHAUSTED and run.failed_attempts.causes == [MISSING]


def test_the_contract_sets_how_many_times(tmp_path: Path) -> None:
    three = _failure({"same_root_cause": 3})
    fixed = make_run(tmp_path, [READ_A, READ_B, BAD_1, FINISH, BAD_2, FINISH, WRITE_GOOD, FINISH], contract_=three, name="a")
    assert fixed.run() is RunState.REVIEW_READY
    stuck = make_run(tmp_path, [READ_A, READ_B, BAD_1, FINISH, BAD_2, FINISH, BAD_3, FINISH], contract_=three, name="b")
    assert stuck.run() is RunState.BLOCKED and stuck.stop_reason is not None
    assert stuck.stop_reason.code == SAME_ROOT_CAUSE and "failed 3 times in a row" in stuck.stop_reason.message


def test_a_different_cause_resets_the_count(tmp_path: Path) -> None:
    empty_limits = {"kind": "write_report", "text": GOOD.replace("## Limitations\nTest material only.\n", "## Limitations\n")}
    run = make_run(tmp_path, [READ_A, READ_B, BAD_1, FINISH, empty_limits, FINISH, BAD_2, FINISH, WRITE_GOOD, FINISH])
    assert run.run() is RunState.REVIEW_READY
    assert run.failed_attempts.causes == [MISSING, "check failed: section_empty", MISSING]


def test_the_repair_policy_rolls_back_when_the_rule_fires_before_its_cap(tmp_path: Path) -> None:
    # RepairPolicy counted only its own cap (3 retries): a second draft failing on the same cause was retried.
    policy = RepairPolicy()
    run = make_run(tmp_path, [READ_A, READ_B, BAD_1, FINISH, BAD_2, FINISH], repair=policy)
    run.run(max_steps=6)
    assert [s.action for s in policy.history] == ["retry", "rollback"]
    assert "same root cause failed twice in a row: retrying cannot fix it" in policy.history[-1].note
    assert run.state is RunState.RUNNING, "the policy answers the rule: the run is not stopped by it"


def test_the_external_loop_reads_the_contracts_rule(tmp_path: Path) -> None:
    # ExternalLoop compared with the previous round only: 'failed 3 times' blocked at the second round.
    loop = ExternalLoop(make_run(tmp_path, [READ_A, READ_B, BAD_1, FINISH], contract_=_failure("same root cause failed 3 times")))
    assert [loop.round().state_after for _ in range(3)] == [LoopState.READY, LoopState.READY, LoopState.BLOCKED]
    assert loop.rounds[-1].why == f"same root cause failed 3 times in a row: {MISSING}"
    assert loop.report is not None and "change the approach" in loop.report.decision_needed


def test_a_resumed_run_keeps_its_count(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.sqlite")
    actions = [READ_A, READ_B, BAD_1, FINISH, BAD_2, FINISH, WRITE_GOOD, FINISH]
    run = make_run(tmp_path, actions, run_id="S1", store=store)
    run.run(max_steps=4)
    assert run.failed_attempts.causes == [MISSING]
    run.close()
    resumed = Run.resume(store, "S1")
    assert resumed.failed_attempts.causes == [MISSING]
    assert resumed.run() is RunState.BLOCKED and resumed.stop_reason is not None
    assert resumed.stop_reason.code == SAME_ROOT_CAUSE and resumed.step_no == 6
    resumed.close()
