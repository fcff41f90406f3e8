"""The human gate: no effect while waiting, executed arguments == approved arguments, safe stops."""

from __future__ import annotations

import hashlib
import json

import pytest
from loophelpers import READ_A, WRITE_GOOD, contract, make_run, notes

from harness_lab.clock import FakeClock
from harness_lab.errors import RunStateError, SimulatedCrash
from harness_lab.faults import CrashPoint, ProcessCrash
from harness_lab.loop.approval import AutoApprove, AutoReject
from harness_lab.loop.executor import Outbox
from harness_lab.records.states import RunState

PUSH = {"kind": "push", "branch": "main", "message": "ship it"}
DELETE = {"kind": "delete_file", "path": "report.md"}


def _sha(payload: object) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


def test_no_file_changes_while_waiting_and_approve_runs_it(tmp_path) -> None:
    run = make_run(tmp_path, [WRITE_GOOD, DELETE, READ_A])
    run.step()
    before = run.sandbox.workspace_hash()
    record = run.step()
    assert record.decision.verdict == "park" and run.state is RunState.WAITING_FOR_HUMAN
    assert run.pending is not None and run.pending.raw == DELETE, "the pending action is inspectable"
    assert run.sandbox.workspace_hash() == before and (tmp_path / "ws" / "report.md").exists()
    steps = run.step_no
    with pytest.raises(RunStateError, match="waits for a human"):
        run.step()
    assert run.step_no == steps and run.sandbox.workspace_hash() == before, "a refused step() changes nothing"
    assert notes(record, "gate_checkpoint"), "checkpoint first"
    run.approve()
    assert not (tmp_path / "ws" / "report.md").exists() and run.state is RunState.RUNNING


def test_executed_arguments_are_the_approved_arguments(tmp_path) -> None:
    outbox = Outbox()
    run = make_run(tmp_path, [PUSH], effects=outbox)
    run.step()
    request = run.waiting
    assert request is not None and request.args_sha256 == _sha(request.args)
    with pytest.raises(RunStateError, match="differ"):
        run.approve(args_sha256="0" * 64)
    assert outbox.sent == {} and run.waiting == request, "a mismatched approval executes nothing"
    record = run.approve(args_sha256=request.args_sha256)
    (executed,) = outbox.sent.values()
    assert executed.model_dump(mode="json") == request.args
    assert _sha(executed.model_dump(mode="json")) == request.args_sha256
    assert record.tool_result is not None and record.tool_result.ok
    decided = [e for e in record.events if e.kind == "human_decided"]
    assert decided and decided[0].args_sha256 == request.args_sha256 and decided[0].approved


def test_reject_stops_safely_with_the_reason_and_no_effect(tmp_path) -> None:
    outbox = Outbox()
    run = make_run(tmp_path, [PUSH], effects=outbox)
    run.step()
    run.reject("not on a Friday")
    assert run.state is RunState.BLOCKED and outbox.sent == {}
    assert run.stop_reason is not None and run.stop_reason.code == "human_rejected"
    assert "not on a Friday" in run.stop_reason.message
    with pytest.raises(RunStateError):
        run.approve()


def test_timeout_stops_safely(tmp_path) -> None:
    clock = FakeClock()
    c = contract()
    c = c.model_copy(update={"human_gate": c.human_gate.model_copy(update={"timeout_seconds": 30})})
    outbox = Outbox()
    run = make_run(tmp_path, [PUSH], contract_=c, clock=clock, effects=outbox)
    run.step()
    clock.advance(29)
    with pytest.raises(RunStateError):
        run.step()
    clock.advance(2)
    record = run.step()
    assert run.state is RunState.BLOCKED and run.stop_reason is not None
    assert run.stop_reason.code == "human_timeout" and record.state_before is RunState.WAITING_FOR_HUMAN
    assert outbox.sent == {}


@pytest.mark.parametrize(("approver", "state", "sent"), [(AutoApprove(), RunState.RUNNING, 1),
                                                        (AutoReject(), RunState.BLOCKED, 0)])
def test_headless_policies_decide_without_waiting(tmp_path, approver, state, sent) -> None:
    outbox = Outbox()
    run = make_run(tmp_path, [PUSH, READ_A], approver=approver, effects=outbox)
    run.step()
    assert run.waiting is None and run.state is state and len(outbox.sent) == sent


def test_gated_kinds_follow_the_contract(tmp_path) -> None:
    c = contract()
    c = c.model_copy(update={"human_gate": c.human_gate.model_copy(update={"required_for": ("release",)})})
    outbox = Outbox()
    run = make_run(tmp_path, [PUSH], contract_=c, effects=outbox)
    run.step()
    assert run.waiting is None and len(outbox.sent) == 1, "push is not gated under this contract"


def test_a_crash_while_waiting_comes_back_waiting_with_the_same_request_and_applies_once(tmp_path) -> None:
    outbox = Outbox()
    run = make_run(tmp_path, [READ_A, PUSH], effects=outbox)
    run.run()
    request = run.waiting
    assert request is not None
    checkpoint_id = notes(run.records[-1], "gate_checkpoint")[0].data["snapshot"]
    checkpoint = next(i for i in run.sandbox.snapshots() if i.id == checkpoint_id)
    assert checkpoint.run_state is not None
    run.inject(ProcessCrash(point=CrashPoint.AFTER_EFFECT))
    with pytest.raises(SimulatedCrash):
        run.approve()
    assert len(outbox.sent) == 1, "the effect was applied before the crash"

    resumed = make_run(tmp_path, [READ_A, PUSH], effects=outbox, resume=True)
    resumed.restore(checkpoint.run_state, source=f"snapshot {checkpoint_id}")
    assert resumed.state is RunState.WAITING_FOR_HUMAN and resumed.waiting == request
    record = resumed.approve(args_sha256=request.args_sha256)
    assert len(outbox.sent) == 1, "re-approving after the crash does not apply the effect twice"
    assert record.tool_result is not None and "already applied" in (record.tool_result.content or "")
