"""LabView after a Ctrl-C (Jupyter's Interrupt) and at a human gate it is too late to approve."""

from __future__ import annotations

from typing import Any

import pytest
from harness_lab.widgets import LabView, Session

from harness_lab import (
    EvidenceCatalogue,
    FakeClock,
    FunctionProposer,
    Run,
    RunState,
    ScriptedProposer,
    load_contract,
)
from harness_lab.paths import data_dir

IDS = ("harness-boundary", "budget-gates", "acceptance-snapshot")
PUSH = {"kind": "push", "remote": "origin", "branch": "main"}


def _contract(*, gate_timeout: float | None = None, wall_clock: float | None = None) -> Any:
    c = load_contract(data_dir() / "contracts" / "report_task.yaml")
    if wall_clock is not None:
        c = c.with_budget(wall_clock_seconds=wall_clock)
    if gate_timeout is not None:
        c = c.model_copy(update={"human_gate": c.human_gate.model_copy(update={"timeout_seconds": gate_timeout})})
    return c


def _reader(tmp_path: Any, name: str, interrupt_at: int | None = None) -> Run:
    asked: list[int] = []

    def propose(_view: object) -> dict[str, str]:
        asked.append(1)
        if len(asked) == interrupt_at:
            raise KeyboardInterrupt  # Interrupt pressed while the model thinks
        return {"kind": "read_evidence", "id": IDS[len(asked) % 3]}

    run = Run(contract=_contract(), proposer=FunctionProposer(propose), evidence=EvidenceCatalogue.from_dir(
        data_dir() / "evidence"), workspace=tmp_path / name, clock=FakeClock())
    run.asked = asked  # type: ignore[attr-defined]
    return run


def test_an_interrupted_run_to_end_leaves_the_dashboard_usable_and_its_steps_in_the_session(tmp_path):
    # Before: the run buttons stayed off and the status line said "running to the end ...…" for
    # good, the panels showed the run as before the call, and the session lost the steps taken.
    run = _reader(tmp_path, "ws", interrupt_at=5)  # the first ask shows the pending proposal
    view = LabView(run, plot=False)
    with pytest.raises(KeyboardInterrupt):
        view.run_to_end()
    assert run.state is RunState.RUNNING and run.step_no == 4 and run.crashed is None  # step 5 undone
    assert not (view.step_button.disabled or view.gate_button.disabled or view.end_button.disabled)
    status = view.status.value
    assert "run_to_end interrupted (KeyboardInterrupt) after 4 step(s)" in status and "after step 4" in status
    assert "running to the end" not in status
    assert "at step 4" in view.state.html.value and view.budget.labels["decisions"].value == "4 / 8"
    # the redraw did not ask the interrupted proposer again (it may be a slow model)
    assert len(run.asked) == 5 and "not asked again" in view.pending.html.value  # type: ignore[attr-defined]
    assert [(e.action, e.args) for e in view.session.entries] == [("run_to_end", {"max_steps": 4})]
    replayed = Session.from_json(view.session.to_json()).replay(LabView(_reader(tmp_path, "fresh"), plot=False))
    assert replayed.identical, replayed.detail
    view.step()  # and it goes on from there
    assert run.step_no == 5 and "not asked" not in view.pending.html.value


class _InterruptedOutbox:
    def apply(self, action: object, idempotency_key: str) -> None:
        raise KeyboardInterrupt  # Interrupt pressed while the push goes out


def test_an_approval_interrupted_mid_effect_shows_the_crash_and_is_not_recorded(tmp_path):
    run = Run(contract=_contract(), proposer=ScriptedProposer([PUSH]), evidence=EvidenceCatalogue.from_dir(
        data_dir() / "evidence"), workspace=tmp_path / "ws", clock=FakeClock(), effects=_InterruptedOutbox())
    view = LabView(run, plot=False)
    view.step()
    assert run.waiting is not None
    with pytest.raises(KeyboardInterrupt):
        view.approve()
    assert run.crash_cause == "interrupted: KeyboardInterrupt"
    # before: still "waiting for a human", the status line and panels as before the click
    assert "approve interrupted (KeyboardInterrupt): run: " in view.status.value
    assert "crashed at after_effect (interrupted: KeyboardInterrupt)" in view.status.value
    assert "crashed (interrupted: KeyboardInterrupt)" in view.pending.html.value
    assert view.step_button.disabled and view.pending.approve_button.disabled
    assert [e.action for e in view.session.entries] == ["step"]


def _parked(tmp_path: Any, **limits: float) -> tuple[Run, FakeClock, LabView]:
    clock = FakeClock()
    run = Run(contract=_contract(**limits), proposer=ScriptedProposer([PUSH], then="finish"),
              evidence=EvidenceCatalogue.from_dir(data_dir() / "evidence"), workspace=tmp_path / "ws", clock=clock)
    view = LabView(run, plot=False)
    view.run_to_gate()
    assert run.waiting is not None and view.step_button.disabled and view.end_button.disabled
    return run, clock, view


def test_a_gate_past_its_timeout_is_closed_by_run_to_end_as_run_does(tmp_path):
    # Before: Step, Run to gate and Run to end stayed off and run_to_end() returned at once,
    # WAITING_FOR_HUMAN, where run.run() closes the gate (human_timeout); the panel still asked
    # for an approval that would execute nothing.
    run, clock, view = _parked(tmp_path, gate_timeout=10)
    clock.advance(20)
    view.refresh()
    assert not (view.step_button.disabled or view.gate_button.disabled or view.end_button.disabled)
    assert "too late for approval, nothing will execute: the gate&#x27;s timeout (10s) passed" in view.pending.html.value
    assert view.run_to_end() is RunState.BLOCKED
    assert run.stop_reason is not None and run.stop_reason.code == "human_timeout" and run.step_no == 2


def test_a_gate_past_its_timeout_stops_run_to_gate_at_the_closing_step(tmp_path):
    run, clock, view = _parked(tmp_path, gate_timeout=10)
    clock.advance(5)
    assert view.run_to_gate() == [] and run.waiting is not None  # within the timeout: a human decides
    assert "waiting for a human: push needs approval" in view.pending.html.value
    clock.advance(5)
    (closed,) = view.run_to_gate()
    assert closed.decision.verdict == "rejected" and run.state is RunState.BLOCKED


def test_a_gate_waiting_past_the_wall_clock_limit_says_an_approval_executes_nothing(tmp_path):
    run, clock, view = _parked(tmp_path, wall_clock=100)
    clock.advance(200)
    view.refresh()  # step() still refuses (a human decides), so the run buttons stay off
    assert view.step_button.disabled and not view.pending.approve_button.disabled
    assert "too late for approval, nothing will execute: the run&#x27;s wall-clock limit (100s)" in view.pending.html.value
    view.approve()
    assert run.state is RunState.EXHAUSTED and run.stop_reason is not None and run.stop_reason.code == "wall_clock"


def test_a_pending_proposal_discarded_after_an_outside_change_is_said_in_the_status_line(tmp_path):
    # Before: the dashboard showed (and the user edited) one proposal, Step ran another, and the
    # status line said only "RUNNING after step 2": the discard was a note deep in the trace.
    script = [{"kind": "write_file", "path": "a.txt", "content": "first"}, {"kind": "read_file", "path": "a.txt"},
              {"kind": "read_evidence", "id": "harness-boundary"}]
    run = Run(contract=_contract(), proposer=ScriptedProposer(script, then="finish"),
              evidence=EvidenceCatalogue.from_dir(data_dir() / "evidence"), workspace=tmp_path / "ws", clock=FakeClock())
    view = LabView(run, plot=False)
    view.step()
    view.edit_pending({"kind": "read_evidence", "id": "budget-gates"})
    assert "budget-gates" in view.pending.html.value
    (run.workspace / "a.txt").write_text("changed by someone else")
    rec = view.step()
    assert rec.proposal is not None and rec.proposal.describe() == "read_evidence(id='harness-boundary')"
    assert ("RUNNING after step 2; the workspace changed outside the run: step 2 discarded the pending proposal "
            "and asked the proposer again") in view.status.value
    view.step()  # the next call, with no discard, says nothing of it
    assert "discarded" not in view.status.value


def test_forks_of_a_run_without_a_store_get_their_own_ids(tmp_path):
    # Before: every fork was "<id>-fork1" (the runtime has no store to look ids up in), so the
    # dashboards below and the status line could not tell two forks apart.
    script = [{"kind": "write_file", "path": "a.txt", "content": "first"},
              {"kind": "write_file", "path": "a.txt", "content": "second"}]
    run = Run(contract=_contract(), proposer=ScriptedProposer(script, then="finish"), run_id="R",
              evidence=EvidenceCatalogue.from_dir(data_dir() / "evidence"), workspace=tmp_path / "ws", clock=FakeClock())
    view = LabView(run, plot=False)
    view.run_to_end(max_steps=2)
    (snap,) = run.sandbox.snapshots()
    first, second = view.fork(snap.id), view.fork(snap.id)
    assert "forked R-fork2 from" in view.status.value
    assert [first.run.run_id, second.run.run_id] == ["R-fork1", "R-fork2"]
    titles = [box.children[0].value for box in view.forks_box.children]
    assert titles[0] != titles[1] and "R-fork2" in titles[1]


def test_an_interrupt_while_the_dashboard_asks_for_the_next_proposal_keeps_the_step_made(tmp_path):
    # The step is quick; asking a slow model for the next proposal (to show it) is where a Ctrl-C
    # lands. Before: the call was not in the session and the dashboard was left half-redrawn.
    run = _reader(tmp_path, "ws", interrupt_at=2)  # ask 1 shows step 1's proposal; ask 2 is the redraw after it
    view = LabView(run, plot=False)
    with pytest.raises(KeyboardInterrupt):
        view.step()
    assert run.step_no == 1 and [e.action for e in view.session.entries] == ["step"]
    assert "step interrupted (KeyboardInterrupt): run: RUNNING after step 1" in view.status.value
    assert "at step 1" in view.state.html.value and "not asked again" in view.pending.html.value
    assert not view.step_button.disabled
    view.step()
    assert run.step_no == 2
