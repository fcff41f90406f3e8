"""A Ctrl-C while a tool executes is a crash mid-effect: the run object refuses further steps, and
with a store ``Run.resume`` decides from the ledger whether the effect may run again."""

from __future__ import annotations

from pathlib import Path

import pytest
from loophelpers import READ_A, READ_B, WRITE_GOOD, make_run

from harness_lab.errors import RunStateError
from harness_lab.faults import CrashPoint
from harness_lab.loop.approval import AskHuman, AutoApprove
from harness_lab.loop.run import Run
from harness_lab.records.actions import GatedAction
from harness_lab.records.states import RunState
from harness_lab.records.tools import ToolResult
from harness_lab.store import SQLiteStore
from harness_lab.store.base import EffectEntry

PUSH = {"kind": "push", "ref": "main"}
ACTIONS = [READ_A, READ_B, PUSH, WRITE_GOOD, {"kind": "finish"}]
PUSH_STEP = 3


class _Abort(BaseException):
    """Not an Exception: like KeyboardInterrupt or SystemExit, it must get through untouched."""


class InterruptedOutbox:
    """Counts every application; the first push is interrupted, after it landed or before."""

    def __init__(self, abort: type[BaseException] = KeyboardInterrupt, *, landed: bool = True) -> None:
        self.applied: list[str] = []
        self.abort: type[BaseException] | None = abort
        self.landed = landed

    def apply(self, action: GatedAction, idempotency_key: str) -> ToolResult:
        abort, self.abort = self.abort, None
        if abort is not None and not self.landed:
            raise abort("Ctrl-C before the push went out")
        self.applied.append(idempotency_key)
        if abort is not None:
            raise abort("Ctrl-C after the push went out, before its result came back")
        return ToolResult.success(action.kind, f"{action.kind} applied", key=idempotency_key)


def _interrupt(run: Run, via: str, abort: type[BaseException]) -> None:
    if via == "approve":
        assert run.run() is RunState.WAITING_FOR_HUMAN
        with pytest.raises(abort):
            run.approve()
    else:
        with pytest.raises(abort):
            run.run()


@pytest.mark.parametrize("abort", [KeyboardInterrupt, _Abort])
@pytest.mark.parametrize("via", ["step", "approve"])
def test_an_interrupt_inside_a_tool_leaves_the_run_crashed_not_half_open(
        tmp_path: Path, via: str, abort: type[BaseException]) -> None:
    # Before: the step stayed half-open (step_no moved on, its events buffered, no record) and the
    # next step() opened step 4 as if the push had never been asked for.
    outbox = InterruptedOutbox(abort)
    run = make_run(tmp_path, ACTIONS, effects=outbox, approver=AskHuman() if via == "approve" else AutoApprove())
    _interrupt(run, via, abort)
    step = run.step_no
    key = f"run:gate:{PUSH_STEP}:" if via == "approve" else f"run:{PUSH_STEP}"
    assert len(outbox.applied) == 1 and outbox.applied[0].startswith(key)
    assert run.crashed is CrashPoint.AFTER_EFFECT, "the push's outcome is unknown: as a crash after the effect"
    assert [r.step for r in run.records] == list(range(1, step)), "the interrupted step has no record"
    assert run.pending is None and run.waiting is None
    interrupted = [e for e in run.events if e.kind == "note" and e.topic == "interrupted"]
    assert len(interrupted) == 1 and interrupted[0].step == step
    assert interrupted[0].data == {"point": "after_effect", "tool": "push", "interrupt": abort.__name__,
                                   "during": "execute"}
    events = list(run.events)
    why = rf"crashed at after_effect \(interrupted: {abort.__name__}\)"
    for call in (run.step, run.run, lambda: run.edit_pending(READ_A)):
        with pytest.raises(RunStateError, match=why + "; resume from a checkpoint"):
            call()
    with pytest.raises(RunStateError, match=why):
        run.inject("tool_timeout")
    assert run.step_no == step and run.events == events and len(outbox.applied) == 1, "nothing ran again"


@pytest.mark.parametrize("landed", [True, False], ids=["landed", "not_landed"])
def test_resume_after_an_interrupted_push_never_applies_it_twice(tmp_path: Path, landed: bool) -> None:
    store = SQLiteStore(tmp_path / "runs.sqlite")
    outbox = InterruptedOutbox(landed=landed)
    run = make_run(tmp_path, ACTIONS, effects=outbox, approver=AutoApprove(), run_id="R1", store=store)
    _interrupt(run, "step", KeyboardInterrupt)
    with pytest.raises(RunStateError, match="crashed at after_effect"):
        run.step()  # before: this opened step 4, committed after a missing step 3
    resumed = Run.resume(store, "R1", effects=outbox, approver=AutoApprove())
    assert resumed.resume_report is not None and resumed.resume_report.ok, resumed.resume_report
    resumed.run()
    # The ledger holds the push's intent and no outcome: as after kill -9, it is never retried blindly.
    assert outbox.applied == (["R1:3"] if landed else [])
    assert resumed.state is RunState.BLOCKED
    assert resumed.stop_reason is not None and resumed.stop_reason.code == "effect_uncertain"
    effect = store.effect("R1:3")
    assert effect is not None and effect.status == "uncertain"


class _InterruptedIntentStore(SQLiteStore):
    """A Ctrl-C while the ledger's intent is being written: the effect itself never started."""

    interrupt = True

    def record_intent(self, entry: EffectEntry) -> EffectEntry | None:
        if self.interrupt:
            self.interrupt = False
            raise KeyboardInterrupt
        return super().record_intent(entry)


def test_an_interrupt_before_the_effect_starts_crashes_before_it_and_resume_applies_it_once(
        tmp_path: Path) -> None:
    store = _InterruptedIntentStore(tmp_path / "runs.sqlite")
    outbox = InterruptedOutbox()
    outbox.abort = None  # the push itself goes through
    run = make_run(tmp_path, ACTIONS, effects=outbox, approver=AutoApprove(), run_id="R1", store=store)
    _interrupt(run, "step", KeyboardInterrupt)
    assert run.crashed is CrashPoint.BEFORE_EFFECT and outbox.applied == []
    with pytest.raises(RunStateError, match="crashed at before_effect"):
        run.step()
    resumed = Run.resume(store, "R1", effects=outbox, approver=AutoApprove())
    assert resumed.resume_report is not None and resumed.resume_report.ok, resumed.resume_report
    assert resumed.run() is RunState.REVIEW_READY
    assert outbox.applied == ["R1:3"], "the push the interrupt stopped in time runs once, after resume"
