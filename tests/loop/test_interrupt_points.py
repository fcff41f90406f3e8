"""A Ctrl-C at the other points of a step: asking the approver (nothing ran: the step is undone and
asked again), observing or recording a step whose effect ran, and validating a finish (the effect
landed, the step is unrecorded: a crash after the effect, settled by ``Run.resume`` from the ledger)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from loophelpers import READ_A, READ_B, WRITE_GOOD, make_run
from runhelpers import CountingOutbox

import harness_lab.loop._finish_check
import harness_lab.loop._run_base
from harness_lab.errors import RunStateError
from harness_lab.faults import CrashPoint
from harness_lab.loop.approval import ApprovalDecision, ApprovalRequest, AskHuman, AutoApprove
from harness_lab.loop.run import Run
from harness_lab.records.states import RunState
from harness_lab.store import SQLiteStore

PUSH = {"kind": "push", "ref": "main"}
ACTIONS = [READ_A, READ_B, PUSH, WRITE_GOOD, {"kind": "finish"}]


class InterruptedApprover:
    """Ctrl-C while the first request is being decided (a person at an input() prompt); approves after."""

    def __init__(self) -> None:
        self.asked: list[int] = []

    def decide(self, request: ApprovalRequest) -> ApprovalDecision | None:
        self.asked.append(request.step)
        if len(self.asked) == 1:
            raise KeyboardInterrupt
        return ApprovalDecision(approved=True, reason="ok", by="ana")


def _interrupt_once(obj: Any, name: str, monkeypatch: pytest.MonkeyPatch, *, when: Any = None) -> list[int]:
    """Make ``obj.name`` raise KeyboardInterrupt on its first call for which ``when(*args)`` holds."""
    real, calls = getattr(obj, name), []

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        if not calls and (when is None or when(*args, **kwargs)):
            calls.append(1)
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(obj, name, wrapped)
    return calls


def _seqs_contiguous(run: Run) -> bool:
    return [e.seq for e in run.events] == list(range(1, len(run.events) + 1))


# -- 1. in approver.decide: nothing ran, the step is undone --------------------------------------------
@pytest.mark.parametrize("with_store", [False, True], ids=["no_store", "store"])
def test_an_interrupt_while_the_approver_decides_undoes_the_step_and_asks_again(
        tmp_path: Path, with_store: bool) -> None:
    # Before: step_no stayed at 3 with its events buffered and the gates counting the push; the next
    # step was numbered 4 and carried the half step's events.
    store = SQLiteStore(tmp_path / "runs.sqlite") if with_store else None
    outbox, approver = CountingOutbox(), InterruptedApprover()
    run = make_run(tmp_path, ACTIONS, effects=outbox, approver=approver, run_id="R1", store=store)
    run.step(), run.step()
    events, gates, used = list(run.events), run.gates.state(), run.usage
    with pytest.raises(KeyboardInterrupt):
        run.step()
    assert run.step_no == 2 and run.state is RunState.RUNNING and run.crashed is None
    assert run.events == events and [r.step for r in run.records] == [1, 2]
    assert run.gates.state() == gates and run.usage.decisions == used.decisions
    assert run.pending is not None and run.pending.raw == PUSH, "the same proposal is asked about again"
    assert outbox.applied == []
    assert run.run() is RunState.REVIEW_READY
    assert approver.asked == [3, 3] and outbox.applied == ["R1:3"]
    assert [r.step for r in run.records][-3:] == [3, 4, 5] and _seqs_contiguous(run)
    if store is not None:
        assert [s.step for s in store.steps("R1")][-3:] == [3, 4, 5]


# -- 2. after the effect: observing, recording, validating ---------------------------------------------
def _crashed_after(run: Run, point: CrashPoint, during: str, tool: str | None, step: int) -> None:
    assert run.crashed is point
    assert run.crash_cause == "interrupted: KeyboardInterrupt"
    (note,) = [e for e in run.events if e.kind == "note" and e.topic == "interrupted"]
    assert note.step == step
    assert note.data == {"point": point.value, "tool": tool, "interrupt": "KeyboardInterrupt", "during": during}
    assert [r.step for r in run.records] == list(range(1, step)), "the interrupted step has no record"
    events = list(run.events)
    why = rf"crashed at {point.value} \(interrupted: KeyboardInterrupt\); resume from a checkpoint"
    for call in (run.step, run.run, lambda: run.edit_pending(READ_A)):
        with pytest.raises(RunStateError, match=why):
            call()
    assert run.step_no == step and run.events == events


def _interrupt_observe(run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    # what the push returned, as the step observes it
    _interrupt_once(run.context, "add_interaction", monkeypatch, when=lambda *a, **k: k["source"].endswith(":push"))


def _interrupt_close(run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    # the push step's record being made (its sixth argument is the tool's result)
    _interrupt_once(harness_lab.loop._run_base, "step_record", monkeypatch,
                    when=lambda *a, **k: a[5] is not None and a[5].tool == "push")


@pytest.mark.parametrize("via", ["step", "approve"])
@pytest.mark.parametrize("where", ["observe", "close"])
def test_an_interrupt_after_the_effect_ran_is_a_crash_after_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, via: str, where: str) -> None:
    # Before: the push had run, the step stayed half-open and the run carried on at step 4.
    outbox = CountingOutbox()
    run = make_run(tmp_path, ACTIONS, effects=outbox, approver=AskHuman() if via == "approve" else AutoApprove())
    (_interrupt_observe if where == "observe" else _interrupt_close)(run, monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        if via == "approve":
            assert run.run() is RunState.WAITING_FOR_HUMAN
            run.approve()
        else:
            run.run()
    assert len(outbox.applied) == 1
    _crashed_after(run, CrashPoint.AFTER_EFFECT, where, "push", 4 if via == "approve" else 3)
    assert len(outbox.applied) == 1


@pytest.mark.parametrize("where", ["observe", "close"])
def test_resume_after_an_interrupt_after_the_push_never_applies_it_twice(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    store = SQLiteStore(tmp_path / "runs.sqlite")
    outbox = CountingOutbox()
    run = make_run(tmp_path, ACTIONS, effects=outbox, approver=AutoApprove(), run_id="R1", store=store)
    (_interrupt_observe if where == "observe" else _interrupt_close)(run, monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        run.run()
    with pytest.raises(RunStateError, match="crashed at after_effect"):
        run.step()  # before: this opened step 4, committed after a missing step 3
    resumed = Run.resume(store, "R1", effects=outbox, approver=AutoApprove())
    assert resumed.resume_report is not None and resumed.resume_report.ok, resumed.resume_report
    resumed.run()
    # the push's intent is in the ledger with no outcome: as after kill -9, never retried blindly
    assert outbox.applied == ["R1:3"]
    assert resumed.stop_reason is not None and resumed.stop_reason.code == "effect_uncertain"


def test_an_interrupt_while_the_store_commits_is_a_crash_before_the_commit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = SQLiteStore(tmp_path / "runs.sqlite")
    outbox = CountingOutbox()
    run = make_run(tmp_path, ACTIONS, effects=outbox, approver=AutoApprove(), run_id="R1", store=store)
    _interrupt_once(store, "commit_step", monkeypatch, when=lambda run_id, step, *a, **k: step == 3)
    with pytest.raises(KeyboardInterrupt):
        run.run()
    _crashed_after(run, CrashPoint.BEFORE_COMMIT, "close", "push", 3)
    resumed = Run.resume(store, "R1", effects=outbox, approver=AutoApprove())
    assert resumed.resume_report is not None and resumed.resume_report.ok, resumed.resume_report
    resumed.run()
    assert outbox.applied == ["R1:3"]


@pytest.mark.parametrize("with_store", [False, True], ids=["no_store", "store"])
def test_an_interrupt_while_a_finish_is_validated_is_a_crash_after_the_effect(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, with_store: bool) -> None:
    # Before: the run stayed VALIDATING with a half-open step 5; the next step() refused with
    # "illegal transition validating -> ..." or carried on from there.
    store = SQLiteStore(tmp_path / "runs.sqlite") if with_store else None
    outbox = CountingOutbox()
    run = make_run(tmp_path, ACTIONS, effects=outbox, approver=AutoApprove(), run_id="R1", store=store)
    _interrupt_once(harness_lab.loop._finish_check, "check_report", monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        run.run()
    _crashed_after(run, CrashPoint.AFTER_EFFECT, "validate", "finish", 5)
    assert run.receipt is None and outbox.applied == ["R1:3"]
    if store is not None:  # validation has no outside effect: resume validates again, the push stays applied once
        resumed = Run.resume(store, "R1", effects=outbox, approver=AutoApprove())
        assert resumed.resume_report is not None and resumed.resume_report.ok, resumed.resume_report
        assert resumed.run() is RunState.REVIEW_READY and resumed.receipt is not None
        assert outbox.applied == ["R1:3"]


# -- 3. a second approve() after an interrupted one --------------------------------------------------
def test_approve_or_reject_after_an_interrupted_approve_says_the_run_crashed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Before: "run R1 is running: nothing waits for approval", which hides why.
    run = make_run(tmp_path, ACTIONS, effects=CountingOutbox(), approver=AskHuman(), run_id="R1")
    assert run.run() is RunState.WAITING_FOR_HUMAN
    _interrupt_observe(run, monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        run.approve()
    why = r"run R1 crashed at after_effect \(interrupted: KeyboardInterrupt\); resume from a checkpoint"
    with pytest.raises(RunStateError, match=why):
        run.approve()
    with pytest.raises(RunStateError, match=why):
        run.reject("no")


# -- before the effect: approve() before it acts, the tool call before its effect ------------------------
def test_an_interrupt_in_approve_before_it_acts_leaves_the_request_waiting(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Before: approve() had already cleared the wait; the step stayed half-open and the next step()
    # asked the proposer for something new: the approved push was silently dropped.
    outbox = CountingOutbox()
    run = make_run(tmp_path, ACTIONS, effects=outbox, approver=AskHuman(), run_id="R1")
    assert run.run() is RunState.WAITING_FOR_HUMAN
    request, events, step = run.waiting, list(run.events), run.step_no
    _interrupt_once(run.sandbox, "workspace_hash", monkeypatch)  # approve's look for an outside change
    with pytest.raises(KeyboardInterrupt):
        run.approve()
    assert run.waiting == request and run.state is RunState.WAITING_FOR_HUMAN and run.crashed is None
    assert run.step_no == step and run.events == events and outbox.applied == []
    assert run.pending is not None and run.pending.raw == PUSH
    record = run.approve()
    assert record.step == step + 1 and record.tool_result is not None and outbox.applied == ["R1:gate:3:" + request.args_sha256[:16]]
    assert _seqs_contiguous(run)


@pytest.mark.parametrize("with_store", [False, True], ids=["no_store", "store"])
def test_an_interrupt_in_the_tool_call_before_its_effect_is_a_crash_before_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, with_store: bool) -> None:
    # Before: a Ctrl-C while the tool call looked for an outside change (before the ledger and the
    # effect) left the step half-open, the tool call counted, and the run carried on at step 4.
    store = SQLiteStore(tmp_path / "runs.sqlite") if with_store else None
    outbox = CountingOutbox()
    run = make_run(tmp_path, ACTIONS, effects=outbox, approver=AskHuman(), run_id="R1", store=store)
    assert run.run() is RunState.WAITING_FOR_HUMAN
    hashes: list[int] = []
    _interrupt_once(run.sandbox, "workspace_hash", monkeypatch, when=lambda: hashes.append(1) or len(hashes) == 2)
    with pytest.raises(KeyboardInterrupt):
        run.approve()  # the first hash is approve's own look, the second the push's, before its effect
    _crashed_after(run, CrashPoint.BEFORE_EFFECT, "execute", "push", 4)
    assert outbox.applied == []
    if store is not None:
        resumed = Run.resume(store, "R1", effects=outbox, approver=AskHuman())
        assert resumed.resume_report is not None and resumed.resume_report.ok, resumed.resume_report
        assert resumed.state is RunState.WAITING_FOR_HUMAN
        resumed.approve()
        assert resumed.run() is RunState.REVIEW_READY and len(outbox.applied) == 1


# -- at the step's start: its look for an outside change -------------------------------------------
def test_an_interrupt_while_the_step_looks_for_an_outside_change_undoes_the_step(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Before: step_no had moved on and the run had gone CREATED -> RUNNING with an unrecorded event.
    run = make_run(tmp_path, ACTIONS, effects=CountingOutbox(), approver=AutoApprove())
    _interrupt_once(run.sandbox, "workspace_hash", monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        run.step()
    assert run.step_no == 0 and run.state is RunState.CREATED and run.events == [] and not run.records
    record = run.step()
    assert record.step == 1 and record.state_before is RunState.CREATED and _seqs_contiguous(run)


def test_an_outside_change_half_reported_when_interrupted_is_reported_by_the_next_step(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Before: the run had taken in the new workspace hash before reporting the change, so after the
    # Ctrl-C no step ever reported it (nor told the proposer its reads were stale).
    run = make_run(tmp_path, [{"kind": "read_file", "path": "notes.md"}, READ_A, READ_B],
                   effects=CountingOutbox(), approver=AutoApprove())
    (tmp_path / "ws" / "notes.md").write_text("old", encoding="utf-8")
    run.step()
    (tmp_path / "ws" / "notes.md").write_text("new", encoding="utf-8")
    _interrupt_once(run.context, "add_feedback", monkeypatch, when=lambda *a, **k: k.get("source") == "external")
    with pytest.raises(KeyboardInterrupt):
        run.step()
    assert run.step_no == 1 and len(run.records) == 1
    record = run.step()
    notes = [e for e in record.events if e.kind == "note" and e.topic == "external_change"]
    assert record.step == 2 and len(notes) == 1 and _seqs_contiguous(run)
    assert any(item.source == "external" for item in run.context.view().items)
