"""When things happen to a run: a late approval, an expired gate under run(), a Ctrl-C inside the
proposer, an outside change after the pending proposal was made (a review's open defects)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loophelpers import READ_A, contract, evidence, make_run, notes

from harness_lab.clock import FakeClock
from harness_lab.contract import ControlContract
from harness_lab.executor import Outbox
from harness_lab.proposers import FunctionProposer
from harness_lab.run import Run
from harness_lab.states import RunState

PUSH = {"kind": "push", "branch": "main", "message": "ship it"}
THINK = {"kind": "think", "thought": "plan"}


def _gated(timeout: float, **budget: Any) -> ControlContract:
    base = contract(**budget)
    return base.model_copy(update={"human_gate": base.human_gate.model_copy(update={"timeout_seconds": timeout})})


def _function_run(tmp_path: Path, fn: Any) -> Run:
    return Run(contract=contract(), evidence=evidence(), proposer=FunctionProposer(fn), workspace=tmp_path / "ws")


def test_an_approval_after_the_wall_clock_limit_executes_nothing(tmp_path: Path) -> None:
    # Before: approve() checked only the gate's own timeout (an hour); the run's wall-clock limit
    # (a minute) had passed, and the push was made anyway.
    clock = FakeClock()
    outbox = Outbox()
    run = make_run(tmp_path, [READ_A, PUSH], contract_=_gated(3600, wall_clock_seconds=60), clock=clock,
                   effects=outbox)
    run.run()
    assert run.state is RunState.WAITING_FOR_HUMAN
    clock.advance(120)
    record = run.approve(by="ana")
    assert outbox.sent == {} and record.tool_result is None
    assert record.decision.verdict == "exhaust" and run.state is RunState.EXHAUSTED
    assert run.stop_reason is not None and run.stop_reason.code == "wall_clock"
    (late,) = notes(record, "late_approval")
    assert "ana" in late.message and "wall-clock" in late.message
    assert not [e for e in record.events if e.kind == "human_decided"]
    assert run.waiting is None and run.pending is None


def test_run_closes_a_gate_whose_timeout_passed(tmp_path: Path) -> None:
    # Before: run() saw a waiting run and returned at once, WAITING_FOR_HUMAN for good, while
    # step() and approve() closed the timed-out gate.
    clock = FakeClock()
    outbox = Outbox()
    run = make_run(tmp_path, [PUSH], contract_=_gated(30), clock=clock, effects=outbox)
    run.step()
    clock.advance(29)
    assert run.run() is RunState.WAITING_FOR_HUMAN and run.step_no == 1, "within the timeout run() waits"
    clock.advance(2)
    assert run.run() is RunState.BLOCKED
    assert run.step_no == 2 and run.records[-1].state_before is RunState.WAITING_FOR_HUMAN
    assert run.stop_reason is not None and run.stop_reason.code == "human_timeout"
    assert outbox.sent == {} and run.waiting is None
