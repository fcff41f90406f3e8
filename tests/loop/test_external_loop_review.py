"""Review of the external loop: a round that raises leaves the loop where the caller can go on, and a
bad external_change key is refused when given, not at the next round."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from loophelpers import FINISH, READ_A, READ_B, WRITE_GOOD, contract, evidence, make_run

from harness_lab.errors import RunStateError
from harness_lab.faults import CrashPoint
from harness_lab.loop.run import Run
from harness_lab.loop.scheduler import ExternalLoop, RoundOutcome
from harness_lab.proposers import FunctionProposer
from harness_lab.records.states import LoopState, RunState

PUSH = {"kind": "push", "branch": "main"}


def test_ctrl_c_while_the_proposer_thinks_leaves_the_loop_ready_not_running_forever(tmp_path: Path) -> None:
    actions: list[Any] = [READ_A, READ_B, WRITE_GOOD, FINISH]
    calls = 0

    def propose(view: object) -> Any:
        nonlocal calls
        calls += 1
        if calls == 2:  # Ctrl-C in the middle of round 1, while the model thinks: the run undoes the step
            raise KeyboardInterrupt
        return actions.pop(0)

    run = Run(contract=contract(), evidence=evidence(), workspace=tmp_path / "ws", proposer=FunctionProposer(propose))
    loop = ExternalLoop(run)
    with pytest.raises(KeyboardInterrupt):
        loop.round()
    assert loop.state is LoopState.READY and loop.rounds == [] and run.step_no == 1
    record = loop.round()  # was: RunStateError "the loop is running, not ready", for ever
    assert record.outcome is RoundOutcome.GOAL_VERIFIED and loop.state is LoopState.COMPLETED
    assert run.state is RunState.REVIEW_READY


def test_a_refused_approve_leaves_the_loop_waiting_for_the_human(tmp_path: Path) -> None:
    loop = ExternalLoop(make_run(tmp_path, [READ_A, PUSH, READ_B, WRITE_GOOD, FINISH]))
    assert loop.round().state_after is LoopState.WAITING_FOR_HUMAN
    with pytest.raises(ValueError, match="by: a string, got None"):
        loop.approve(by=None)  # type: ignore[arg-type]
    assert loop.state is LoopState.WAITING_FOR_HUMAN and loop.run.waiting is not None
    done = loop.approve(by="alice")
    assert (done.state_before, done.state_after) == (LoopState.WAITING_FOR_HUMAN, LoopState.COMPLETED)


def test_a_crashed_run_leaves_the_loop_ready_with_the_runs_own_error(tmp_path: Path) -> None:
    loop = ExternalLoop(make_run(tmp_path, [READ_A, READ_B, WRITE_GOOD, FINISH]))
    loop.run.crashed = CrashPoint.AFTER_EFFECT  # as a Ctrl-C after a tool call leaves it
    with pytest.raises(RunStateError, match="crashed at"):
        loop.round()
    assert loop.state is LoopState.READY
    with pytest.raises(RunStateError, match="crashed at"):  # the run's reason again, not "the loop is running"
        loop.round()


@pytest.mark.parametrize("key", [None, 3, "", "   "])
def test_external_change_refuses_a_key_that_names_nothing_when_given(tmp_path: Path, key: object) -> None:
    loop = ExternalLoop(make_run(tmp_path, [READ_A, READ_B, WRITE_GOOD, FINISH]))
    with pytest.raises(ValueError, match=re.escape(f"external_change: a context item's key or source "
                                                   f"(a non-empty string), got {key!r}")):
        loop.external_change("evidence:harness-boundary", key)  # type: ignore[arg-type]
    assert loop.state is LoopState.READY
    record = loop.round()  # nothing half-recorded: the good key given with the bad one was not kept either
    assert record.outcome is RoundOutcome.GOAL_VERIFIED and loop.state is LoopState.COMPLETED
