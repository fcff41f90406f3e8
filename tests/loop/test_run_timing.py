"""When things happen to a run: a late approval, an expired gate under run(), a Ctrl-C inside the
proposer, an outside change after the pending proposal was made (a review's open defects)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from loophelpers import READ_A, contract, evidence, make_run, notes

from harness_lab.clock import FakeClock
from harness_lab.contract import ControlContract
from harness_lab.loop.executor import Outbox
from harness_lab.loop.run import Run
from harness_lab.proposers import FunctionProposer
from harness_lab.records.states import RunState

PUSH = {"kind": "push", "branch": "main", "message": "ship it"}
THINK = {"kind": "think", "thought": "plan"}


def _gated(timeout: float, **budget: Any) -> ControlContract:
    base = contract(**budget)
    return base.model_copy(update={"human_gate": base.human_gate.model_copy(update={"timeout_seconds": timeout})})


def _interrupting(script: Iterator[object]) -> Callable[[object], object]:
    """A proposer reading ``script``: each item is proposed, and ``KeyboardInterrupt`` is raised (a Ctrl-C)."""
    def propose(view: object) -> object:
        nxt = next(script)
        if nxt is KeyboardInterrupt:
            raise KeyboardInterrupt
        return nxt
    return propose


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
    assert not run.gate_expired and not run.step_due
    assert run.run() is RunState.WAITING_FOR_HUMAN and run.step_no == 1, "within the timeout run() waits"
    clock.advance(2)
    assert run.gate_expired and run.step_due, "the next step closes the gate"
    assert run.run() is RunState.BLOCKED
    assert not run.step_due and not run.gate_expired
    assert run.step_no == 2 and run.records[-1].state_before is RunState.WAITING_FOR_HUMAN
    assert run.stop_reason is not None and run.stop_reason.code == "human_timeout"
    assert outbox.sent == {} and run.waiting is None


class _Abort(BaseException):
    """Not an Exception: like KeyboardInterrupt or SystemExit, it must get through untouched."""


@pytest.mark.parametrize("abort", [KeyboardInterrupt, _Abort])
def test_an_interrupt_inside_the_proposer_leaves_no_half_open_step(tmp_path: Path, abort: type[BaseException]) -> None:
    # Before: step_no had moved on, the run had gone CREATED -> RUNNING with an event, and that event
    # sat in the step's buffer with no record; the next step was numbered 2 and carried it.
    interrupt = [True]

    def propose(view: object) -> object:
        if interrupt[0]:
            interrupt[0] = False
            raise abort("Ctrl-C")
        return THINK

    run = _function_run(tmp_path, propose)
    with pytest.raises(abort):
        run.step()
    assert run.step_no == 0 and run.state is RunState.CREATED and run.events == [] and not run.records
    assert run.pending is not None and run.pending.raw == THINK
    record = run.step()
    assert record.step == 1 and record.state_before is RunState.CREATED and record.proposal is not None
    assert [e.seq for e in run.events] == list(range(1, len(run.events) + 1))
    assert [e for e in record.events if e.kind == "state_changed"][0].before is RunState.CREATED


def test_an_interrupt_after_an_outside_change_keeps_the_change_and_nothing_else(tmp_path: Path) -> None:
    # The outside change is a fact the interrupted step saw (its observations are already marked
    # stale): its note stays, once, for the next step; the step itself is undone.
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "notes.md").write_text("old", encoding="utf-8")
    script = iter([{"kind": "read_file", "path": "notes.md"}, KeyboardInterrupt, THINK])
    run = _function_run(tmp_path, _interrupting(script))
    run.step()
    before = list(run.events)
    (tmp_path / "ws" / "notes.md").write_text("new", encoding="utf-8")
    with pytest.raises(KeyboardInterrupt):
        run.step()
    assert run.step_no == 1 and run.state is RunState.RUNNING and len(run.records) == 1
    assert run.events[: len(before)] == before
    assert [e.topic for e in run.events[len(before):] if e.kind == "note"] == ["external_change"]
    record = run.step()
    assert record.step == 2 and len(notes(record, "external_change")) == 1
    assert [e.seq for e in run.events] == list(range(1, len(run.events) + 1))


def test_a_pending_proposal_made_before_an_outside_change_is_asked_again(tmp_path: Path) -> None:
    # Before: step() saw the change and marked the read stale, then wrote "v2", which the proposer
    # had made from the stale view.
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "notes.md").write_text("old", encoding="utf-8")
    seen: list[Any] = []

    def propose(view: Any) -> object:
        seen.append(view)
        if len(seen) == 1:
            return {"kind": "read_file", "path": "notes.md"}
        return {"kind": "write_file", "path": "out.md", "content": f"v{len(seen)}"}

    run = _function_run(tmp_path, propose)
    run.step()
    stale = run.pending
    assert stale is not None and stale.raw["content"] == "v2"
    (tmp_path / "ws" / "notes.md").write_text("new", encoding="utf-8")
    record = run.step()
    assert (tmp_path / "ws" / "out.md").read_text(encoding="utf-8") == "v3"
    assert record.proposal is not None and record.proposal.raw["content"] == "v3" and len(seen) == 3
    (discarded,) = notes(record, "pending_discarded")
    assert discarded.data["proposal"] == stale.raw
    assert [e.topic for e in record.events if e.kind == "note"][:2] == ["external_change", "pending_discarded"]


def test_an_interrupt_after_a_discard_does_not_bring_the_stale_proposal_back(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "notes.md").write_text("old", encoding="utf-8")
    script = iter([{"kind": "read_file", "path": "notes.md"}, {"kind": "write_file", "path": "out.md", "content": "stale"},
                   KeyboardInterrupt, {"kind": "write_file", "path": "out.md", "content": "fresh"}])
    run = _function_run(tmp_path, _interrupting(script))
    run.step()
    assert run.pending is not None
    (tmp_path / "ws" / "notes.md").write_text("new", encoding="utf-8")
    with pytest.raises(KeyboardInterrupt):
        run.step()
    assert run.step_no == 1 and run._pending is None
    record = run.step()
    assert (tmp_path / "ws" / "out.md").read_text(encoding="utf-8") == "fresh"
    assert [e.topic for e in record.events if e.kind == "note"][:2] == ["external_change", "pending_discarded"]
