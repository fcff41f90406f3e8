"""Review of the convergence gate at other repeat limits and of four fault answers: the recorded
answer says what the harness did (or why there was nothing to do), with the real numbers."""

from __future__ import annotations

from pathlib import Path

import pytest
from loophelpers import READ_A, READ_B, READ_C, WRITE_GOOD, make_run, notes

from harness_lab.clock import FakeClock
from harness_lab.faults import BudgetSqueeze
from harness_lab.loop.run import Run
from harness_lab.records.states import RunState


@pytest.mark.parametrize("limit", [1, 2])  # 3, the default: tests/loop/test_gates.py
def test_the_convergence_hint_comes_at_the_limit_names_it_and_a_repeat_after_it_stops(tmp_path: Path,
                                                                                      limit: int) -> None:
    # Before: the hint always said "3 times", even at repeat_limit 1 or 2.
    run = make_run(tmp_path, [READ_A] * (limit + 1))
    run.gates.repeat_limit = limit
    run.run()
    verdicts = [r.decision.verdict for r in run.records]
    assert verdicts == ["execute"] * (limit - 1) + ["refuse", "block"]
    hint = run.records[limit - 1].decision.reason
    assert (f"the same call {limit} times" if limit > 1 else "repeat limit (1 call in a row)") in hint
    assert run.state is RunState.BLOCKED and run.stop_reason is not None and run.stop_reason.code == "no_progress"


def test_at_repeat_limit_1_a_different_call_after_the_hint_is_not_no_progress(tmp_path: Path) -> None:
    # Before: with nothing remembered at limit 1, any call after a hint stopped the run as "no progress".
    run = make_run(tmp_path, [READ_A, READ_B, READ_C])
    run.gates.repeat_limit = 1
    run.run(max_steps=3)
    assert [r.decision.verdict for r in run.records] == ["refuse", "refuse", "refuse"]
    assert run.state is RunState.RUNNING


def test_stale_context_at_step_1_says_why_nothing_was_detected(tmp_path: Path) -> None:
    # Before: "external change NOT detected", which reads like a harness failure.
    run = Run.from_scenario("conforming_report", workspace=tmp_path / "ws", clock=FakeClock())
    run.inject("stale_context", at_step=1)
    run.step()
    (record,) = run.faults
    assert "NOT detected" not in record.answer
    assert "observed nothing of the workspace before step 1, so nothing could go stale" in record.answer
    later = Run.from_scenario("conforming_report", workspace=tmp_path / "ws2", clock=FakeClock())
    later.inject("stale_context", at_step=2)
    later.run(max_steps=2)
    assert "the workspace changed outside the run before step 2" in later.faults[0].answer


def test_artifact_changed_after_validation_answer_states_the_detection(tmp_path: Path) -> None:
    # Before: the answer ended "run RUNNING" without saying the harness caught the change.
    run = Run.from_scenario("conforming_report", workspace=tmp_path / "ws", clock=FakeClock())
    run.inject("artifact_changed_after_validation")
    run.run()
    first = run.faults[0]
    assert first.state_after is RunState.RUNNING
    assert "change detected by the re-hash before acceptance" in first.answer
    assert any(notes(r, "artifact_changed") for r in run.records)


def test_artifact_changed_after_validation_unfired_says_what_it_waits_for(tmp_path: Path) -> None:
    # Before: "never fired ... before its after_validate hook was reached", with no word of why.
    run = make_run(tmp_path, [READ_A, {"kind": "write_report", "text": "no citations"}, {"kind": "finish"}],
                   then="finish")
    run.inject("artifact_changed_after_validation")
    run.run()
    assert not run.faults and run.state is not RunState.REVIEW_READY
    (message,) = [e.message for e in run.events if e.kind == "note" and e.topic == "fault_unfired"]
    assert "never fired" in message and "it waits for a finish that passes validation" in message


def test_budget_squeeze_context_answer_says_the_budget_was_not_met_and_by_how_much(tmp_path: Path) -> None:
    # Before: the answer was silent about the context budget the pinned items kept the view above.
    run = make_run(tmp_path, [READ_A, READ_B, WRITE_GOOD])
    run.run(max_steps=2)
    run.inject(BudgetSqueeze(tool_calls_left=5, context_tokens=50))
    run.step()
    held = run.context.view().total_tokens
    assert held > 50
    (record,) = run.faults
    assert f"context budget of 50 tokens NOT met: the view holds {held} tokens ({held - 50} over)" in record.answer
