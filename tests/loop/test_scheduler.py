"""The external loop: seed 000's table row by row, the stop condition, and a property over random runs."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from loophelpers import FINISH, GOOD, READ_A, READ_B, READ_C, WRITE_GOOD, contract, evidence, make_run

from harness_lab.clock import FakeClock
from harness_lab.errors import RunStateError
from harness_lab.loop.run import Run
from harness_lab.loop.scheduler import (
    SEED_000_TABLE,
    ExternalLoop,
    RoundFacts,
    RoundOutcome,
    classify,
    next_state,
)
from harness_lab.proposers import FunctionProposer
from harness_lab.records.states import LOOP_TRANSITIONS, LoopState, RunState

BAD = GOOD.replace("## Limitations\nTest material only.\n", "")
WRITE_BAD = {"kind": "write_report", "text": BAD}
PUSH = {"kind": "push", "branch": "main"}

# Seed 000, as written: current result -> next state.
SEED_ROWS = [
    (RoundOutcome.GOAL_VERIFIED, LoopState.COMPLETED),
    (RoundOutcome.RECOVERABLE_FAILURE, LoopState.READY),
    (RoundOutcome.HUMAN_GATE, LoopState.WAITING_FOR_HUMAN),
    (RoundOutcome.UNRECOVERABLE, LoopState.BLOCKED),
    (RoundOutcome.CONTEXT_STALE, LoopState.READY),
]


@pytest.mark.parametrize(("outcome", "state"), SEED_ROWS)
def test_seed_table_row(outcome: RoundOutcome, state: LoopState) -> None:
    assert next_state(outcome) is state
    assert state in LOOP_TRANSITIONS[LoopState.RUNNING], "every row is a legal move out of a round"
    assert SEED_000_TABLE[outcome][1], "each row says how it is handled"


def test_table_has_exactly_the_seed_rows() -> None:
    assert set(SEED_000_TABLE) == {o for o, _ in SEED_ROWS} and len(SEED_000_TABLE) == 5


@pytest.mark.parametrize(
    ("facts", "previous", "left", "outcome"),
    [
        (RoundFacts(run_state=RunState.REVIEW_READY, stale=True), None, 3, RoundOutcome.GOAL_VERIFIED),
        (RoundFacts(run_state=RunState.EXHAUSTED), None, 3, RoundOutcome.UNRECOVERABLE),
        (RoundFacts(run_state=RunState.BLOCKED), None, 3, RoundOutcome.UNRECOVERABLE),
        (RoundFacts(run_state=RunState.WAITING_FOR_HUMAN, stale=True), None, 3, RoundOutcome.HUMAN_GATE),
        (RoundFacts(run_state=RunState.RUNNING, root_cause="x", stale=True), "x", 3, RoundOutcome.CONTEXT_STALE),
        (RoundFacts(run_state=RunState.RUNNING, root_cause="x"), None, 3, RoundOutcome.RECOVERABLE_FAILURE),
        (RoundFacts(run_state=RunState.RUNNING, root_cause="x"), "y", 3, RoundOutcome.RECOVERABLE_FAILURE),
        (RoundFacts(run_state=RunState.RUNNING, root_cause="x"), "x", 3, RoundOutcome.UNRECOVERABLE),
        (RoundFacts(run_state=RunState.RUNNING, root_cause="x"), None, 0, RoundOutcome.UNRECOVERABLE),
    ],
)
def test_classify_gives_one_outcome(facts, previous, left, outcome) -> None:
    assert classify(facts, previous_root_cause=previous, rounds_left=left)[0] is outcome


# -- the loop around a real run ---------------------------------------------------------------

def test_goal_verified_completes_with_the_final_evidence(tmp_path) -> None:
    loop = ExternalLoop(make_run(tmp_path, [READ_A, READ_B, WRITE_GOOD, FINISH]))
    record = loop.round()
    assert (record.state_before, record.state_after) == (LoopState.READY, LoopState.COMPLETED)
    assert loop.final_evidence is not None and loop.final_evidence == loop.run.receipt
    with pytest.raises(RunStateError):
        loop.round()


def test_recoverable_failure_records_root_cause_and_narrows_the_next_round(tmp_path) -> None:
    loop = ExternalLoop(make_run(tmp_path, [READ_A, READ_B, WRITE_BAD, FINISH, WRITE_GOOD, FINISH]))
    first = loop.round()
    assert first.outcome is RoundOutcome.RECOVERABLE_FAILURE and first.state_after is LoopState.READY
    assert first.root_cause == "check failed: section_missing" and loop.root_causes == [first.root_cause]
    assert "root cause: check failed: section_missing" in loop.run.context.view().render()
    second = loop.round()
    assert second.state_after is LoopState.COMPLETED and [r.round for r in loop.rounds] == [1, 2]


def test_same_root_cause_twice_blocks_with_evidence_and_the_decision_needed(tmp_path) -> None:
    loop = ExternalLoop(make_run(tmp_path, [READ_A, READ_B, WRITE_BAD, FINISH]))  # then: finish again
    assert loop.round().state_after is LoopState.READY
    second = loop.round()
    assert second.state_after is LoopState.BLOCKED and second.why.startswith("same root cause failed twice")
    report = loop.report
    assert report is not None and report.root_causes == ("check failed: section_missing",) * 2
    assert report.evidence and any("finish" in line for line in report.evidence)
    assert "change the approach" in report.decision_needed


def test_a_different_root_cause_is_not_the_stop_condition(tmp_path) -> None:
    no_limits = GOOD.replace("## Limitations\nTest material only.\n", "## Limitations\n")
    loop = ExternalLoop(make_run(tmp_path, [READ_A, READ_B, WRITE_BAD, FINISH,
                                            {"kind": "write_report", "text": no_limits}, FINISH, WRITE_GOOD, FINISH]))
    assert [loop.round().state_after for _ in range(3)] == [LoopState.READY, LoopState.READY, LoopState.COMPLETED]
    assert loop.root_causes == ["check failed: section_missing", "check failed: section_empty"]


def test_loop_budget_spent_blocks(tmp_path) -> None:
    loop = ExternalLoop(make_run(tmp_path, [READ_A, READ_B, WRITE_BAD, FINISH, WRITE_GOOD, FINISH]), max_rounds=1)
    record = loop.round()
    assert record.state_after is LoopState.BLOCKED and "loop budget" in record.why
    assert loop.report is not None and "raise the budget" in loop.report.decision_needed


def test_human_gate_waits_then_approve_continues_the_round(tmp_path) -> None:
    loop = ExternalLoop(make_run(tmp_path, [READ_A, PUSH, READ_B, WRITE_GOOD, FINISH]))
    record = loop.round()
    assert record.state_after is LoopState.WAITING_FOR_HUMAN and loop.run.waiting is not None
    with pytest.raises(RunStateError):
        loop.round()
    done = loop.approve()
    assert (done.state_before, done.state_after) == (LoopState.WAITING_FOR_HUMAN, LoopState.COMPLETED)


def test_human_gate_reject_blocks_with_the_reason(tmp_path) -> None:
    loop = ExternalLoop(make_run(tmp_path, [PUSH]))
    loop.round()
    record = loop.reject("not today")
    assert record.state_after is LoopState.BLOCKED and loop.run.stop_reason.code == "human_rejected"  # type: ignore[union-attr]
    assert loop.report is not None and "refused" in loop.report.decision_needed


def test_human_gate_timeout_blocks_on_poll(tmp_path) -> None:
    clock = FakeClock()
    c = contract().model_copy(update={"human_gate": contract().human_gate.model_copy(update={"timeout_seconds": 60})})
    loop = ExternalLoop(make_run(tmp_path, [PUSH], contract_=c, clock=clock))
    loop.round()
    assert loop.poll() is None and loop.state is LoopState.WAITING_FOR_HUMAN
    clock.advance(61)
    record = loop.poll()
    assert record is not None and record.state_after is LoopState.BLOCKED
    assert loop.run.stop_reason is not None and loop.run.stop_reason.code == "human_timeout"


def test_reported_external_change_discards_stale_items_and_goes_ready(tmp_path) -> None:
    loop = ExternalLoop(make_run(tmp_path, [READ_A, READ_B, WRITE_BAD, FINISH, WRITE_GOOD, FINISH]))
    loop.round()
    assert "harness-boundary" in loop.run.context.view().render()
    loop.external_change("evidence:harness-boundary")
    record = loop.round()
    assert record.outcome is RoundOutcome.CONTEXT_STALE and record.state_after is LoopState.READY
    assert record.steps == (), "nothing ran on the stale context"
    assert not any("[E:" not in i.text and i.source.endswith("read_evidence") and i.key == "evidence:harness-boundary"
                   for i in loop.run.context.view().items)
    assert loop.round().state_after is LoopState.COMPLETED


def test_workspace_changed_on_disk_ends_the_round_stale(tmp_path) -> None:
    loop = ExternalLoop(make_run(tmp_path, [{"kind": "write_file", "path": "n.md", "content": "v1"},
                                            {"kind": "read_file", "path": "n.md"}, READ_A, READ_B, WRITE_BAD, FINISH,
                                            READ_C, WRITE_GOOD, FINISH]))
    assert loop.round().root_cause == "check failed: section_missing"
    (tmp_path / "ws" / "n.md").write_text("v2 from someone else")
    record = loop.round()
    assert record.outcome is RoundOutcome.CONTEXT_STALE and len(record.steps) == 1
    assert "v1" not in loop.run.context.view().render()


# -- property: every round yields exactly one of the five states -------------------------------

ACTIONS = [READ_A, READ_B, READ_C, WRITE_GOOD, WRITE_BAD, FINISH, PUSH, {"kind": "set_run_state"}, "garbage"]
OPS = st.sampled_from(["round", "approve", "reject", "stale", "edit"])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(script=st.lists(st.sampled_from(range(len(ACTIONS))), min_size=1, max_size=12),
       ops=st.lists(OPS, min_size=1, max_size=12))
def test_every_round_yields_exactly_one_of_the_five_states(tmp_path_factory, script, ops) -> None:
    queue = list(script)
    ws = tmp_path_factory.mktemp("prop")
    run = Run(contract=contract(max_decisions=12, max_tool_calls=10), evidence=evidence(), workspace=ws / "w",
              proposer=FunctionProposer(lambda view: ACTIONS[queue.pop(0)] if queue else FINISH))
    loop = ExternalLoop(run, max_rounds=4, steps_per_round=5)
    for op in ops:
        before = loop.state
        if before in (LoopState.COMPLETED, LoopState.BLOCKED):
            break
        if before is LoopState.WAITING_FOR_HUMAN:
            record = loop.reject("no") if op == "reject" else loop.approve()
        else:
            if op == "stale":
                loop.external_change("evidence:harness-boundary")
            elif op == "edit":
                (ws / "w" / "other.md").write_text(f"edit {len(loop.rounds)}")
            record = loop.round()
        assert record.state_before is before
        assert record.state_after in set(LoopState) and record.state_after is loop.state
        assert record.state_after is next_state(record.outcome), "the seed table decides"
        assert record.state_after in LOOP_TRANSITIONS[LoopState.RUNNING] or before is LoopState.WAITING_FOR_HUMAN
        if record.state_after is LoopState.COMPLETED:
            assert run.state is RunState.REVIEW_READY and loop.final_evidence is not None
        if record.state_after is LoopState.BLOCKED:
            assert loop.report is not None and loop.report.decision_needed
        assert [r.round for r in loop.rounds] == list(range(1, len(loop.rounds) + 1))
    assert len(loop.rounds) <= len(ops)
