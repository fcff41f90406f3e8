"""Review of fault injection and the loop gates as a researcher breaking a harness uses them: the
trace tells the truth about faults that fired in part or never, and the gates' messages name the
limit and the value."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import pytest
from loophelpers import CONFORMING, READ_A, READ_B, contract, evidence, make_run
from pydantic import ValidationError

from harness_lab.clock import FakeClock
from harness_lab.errors import SimulatedCrash
from harness_lab.faults import Fault, FaultHook, ProcessCrash, RepeatedActionLoop, ToolTimeout
from harness_lab.faults.base import ToolImpl
from harness_lab.loop.run import Run
from harness_lab.proposers import FunctionProposer, ScriptedProposer
from harness_lab.records.actions import ActionBase
from harness_lab.records.states import RunState
from harness_lab.records.tools import ToolResult
from harness_lab.store import SQLiteStore


def _unfired(run: Run) -> list[str]:
    return [e.message for e in run.events if e.kind == "note" and e.topic == "fault_unfired"]


@pytest.mark.parametrize("with_store", [False, True])
def test_a_multi_step_fault_cut_short_is_not_reported_as_never_fired(tmp_path: Path, with_store: bool) -> None:
    # Before: a loop fault that struck steps 1-4 and was cut short by the stop it provoked was noted
    # as "never fired", contradicting run.faults, which holds its four firings.
    store = SQLiteStore(tmp_path / "runs.sqlite") if with_store else None
    run = Run.from_scenario("conforming_report", workspace=tmp_path / "ws", store=store)
    run.inject(RepeatedActionLoop(steps=6), at_step=1)
    run.run()
    assert run.state is RunState.BLOCKED and [f.step for f in run.faults] == [1, 2, 3, 4]
    (message,) = _unfired(run)
    assert "never fired" not in message
    assert "fired at step(s) 1, 2, 3, 4" in message and "2 remaining firing(s) never came" in message
    assert "ended BLOCKED at step 4" in message
    if store is not None:
        store.close()


@pytest.mark.parametrize("with_store", [False, True])
def test_faults_armed_behind_a_crash_are_reported_unfired(tmp_path: Path, with_store: bool) -> None:
    # Before: the crash killed the run object and the faults armed for later steps vanished silently
    # (still "armed" on a run that refuses every further step; a resumed run has its own schedule).
    store = SQLiteStore(tmp_path / "runs.sqlite") if with_store else None
    run = Run.from_scenario("conforming_report", workspace=tmp_path / "ws", store=store)
    run.inject(ProcessCrash(), at_step=2)
    run.inject("tool_timeout", at_step=3)
    with pytest.raises(SimulatedCrash):
        run.run()
    assert [(f.fault, f.step) for f in run.faults] == [("process_crash", 2)]
    (message,) = _unfired(run)
    assert message.startswith("fault tool_timeout never fired: the run crashed at after_effect of step 2")
    assert not run._faults.armed
    if store is not None:
        store.close()


class _CtrlCTool(Fault):
    """The next tool call is interrupted by a Ctrl-C (a test double, not a catalogue entry)."""

    name: str = "ctrl_c_tool"
    hook: ClassVar[FaultHook] = "tool"

    def tool(self, action: ActionBase) -> ToolImpl:
        def impl(_: ActionBase) -> ToolResult:
            raise KeyboardInterrupt

        return impl


def test_faults_armed_behind_an_interrupt_are_reported_unfired(tmp_path: Path) -> None:
    run = make_run(tmp_path, CONFORMING)
    run.inject(_CtrlCTool(), at_step=1)
    run.inject("malformed_proposal", at_step=2)
    with pytest.raises(KeyboardInterrupt):
        run.step()
    assert run.crash_cause == "interrupted: KeyboardInterrupt"
    (message,) = _unfired(run)
    assert message.startswith("fault malformed_proposal never fired: the run was interrupted at after_effect of step 1")


@pytest.mark.parametrize("steps", [0, -2])
def test_repeated_action_loop_refuses_a_step_count_below_one(steps: int) -> None:
    # Before: the subclass redefined `steps` without the base's ge=1, so 0 or -2 was accepted (and fired once).
    with pytest.raises(ValidationError, match="steps"):
        RepeatedActionLoop(steps=steps)


@pytest.mark.parametrize("slow_proposer", [False, True])
def test_the_wall_clock_message_never_shows_less_than_the_limit(tmp_path: Path, slow_proposer: bool) -> None:
    # Before: "wall-clock limit reached (0.0s/0.04s)": the elapsed time, rounded to 0.1 s, read below the limit.
    clock = FakeClock()

    def slow(view: object) -> object:  # the time passes while the model thinks: the call's gate sees it
        clock.advance(0.041)
        return READ_B

    proposer = FunctionProposer(slow) if slow_proposer else ScriptedProposer([READ_A, READ_B])
    run = Run(contract=contract(wall_clock_seconds=0.04), evidence=evidence(), proposer=proposer,
              workspace=tmp_path / "ws", clock=clock)
    if not slow_proposer:
        run.step()
        clock.advance(0.041)
    record = run.step()
    assert run.stop_reason is not None and run.stop_reason.code == "wall_clock"
    assert record.decision.reason.startswith("wall-clock limit reached (0.041s/0.04s)")
    assert record.decision.reason.endswith("call not made") is slow_proposer


@pytest.mark.parametrize("with_store", [False, True])
def test_a_tool_timeout_spends_its_seconds_of_the_wall_clock_budget(tmp_path: Path, with_store: bool) -> None:
    # Before: the simulated hang took no time at all: a 300 s timeout under a 60 s wall-clock budget
    # left elapsed at 0 and the run went on (to EXHAUSTED by decisions, never by the wall clock).
    store = SQLiteStore(tmp_path / "runs.sqlite") if with_store else None
    run = Run(contract=contract(wall_clock_seconds=60), evidence=evidence(), proposer=ScriptedProposer(CONFORMING),
              workspace=tmp_path / "ws", clock=FakeClock(), store=store)
    run.inject(ToolTimeout(seconds=300), at_step=2)
    first, second = run.step(), run.step()
    assert first.usage.elapsed_s == 0 and second.usage.elapsed_s == 300
    assert second.tool_result is not None and second.tool_result.status == "timeout"
    (record,) = run.faults
    assert "300s charged to the wall clock" in record.effect and "run RUNNING" in record.answer
    third = run.step()
    assert third.decision.verdict == "exhaust" and run.state is RunState.EXHAUSTED
    assert run.stop_reason is not None and run.stop_reason.code == "wall_clock"
    assert run.stop_reason.message == "wall-clock limit reached (300s/60s)"
    if store is not None:
        store.close()
