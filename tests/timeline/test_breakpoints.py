"""Breakpoints: run(until=...) stops before a matching tool call executes, after the step meeting the others."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness_lab import Run, RunState
from harness_lab.contract import load_contract
from harness_lab.evidence import EvidenceCatalogue
from harness_lab.loop.breakpoints import spent_fraction
from harness_lab.paths import data_dir
from harness_lab.proposers import ScriptedProposer
from harness_lab.timeline import Breakpoint


def _scenario(name: str = "missing_limitations") -> Run:
    return Run.from_scenario(name)


def test_a_tool_breakpoint_stops_with_the_call_pending_and_not_executed() -> None:
    with _scenario() as run:
        state = run.run(until=Breakpoint.tool("write_report"))
        assert state is RunState.RUNNING and run.step_no == 2
        assert run.pending is not None and run.pending.action is not None
        assert run.pending.action.kind == "write_report"
        assert not (run.workspace / "report.md").exists(), "stopped before it executed"
        assert [r.proposal.action.kind for r in run.records if r.proposal and r.proposal.action] == [
            "read_evidence", "read_evidence"]


def test_continuing_from_a_tool_breakpoint_executes_the_call_and_goes_on() -> None:
    with _scenario() as run:
        run.run(until=Breakpoint.tool("write_report"))
        run.run(until=[Breakpoint.tool("write_report"), Breakpoint.tool("finish")])
        assert run.step_no == 3 and (run.workspace / "report.md").exists()
        assert run.pending is not None and run.pending.action is not None and run.pending.action.kind == "finish"


def test_an_edit_at_a_tool_breakpoint_is_what_continuing_executes() -> None:
    with _scenario() as run:
        run.run(until=Breakpoint.tool("write_report"))
        text = run.pending.raw["text"] + "\n\n## Limitations\nScripted test material only.\n"  # type: ignore[union-attr]
        run.edit_pending(text=text)
        run.run(until=Breakpoint.tool("write_report"))  # the edited call executes; no write_report follows
        assert (run.workspace / "report.md").read_text(encoding="utf-8") == text
        assert run.state is RunState.REVIEW_READY


def test_a_state_breakpoint_stops_after_the_step_that_enters_it() -> None:
    with _scenario() as run:
        assert run.run(until=Breakpoint.state(RunState.RUNNING)) is RunState.RUNNING and run.step_no == 1
        # already RUNNING: the breakpoint is met again after the next step (a RunState would not step at all)
        assert run.run(until=Breakpoint.state("RUNNING")) is RunState.RUNNING and run.step_no == 2
        assert run.run(until=RunState.RUNNING) is RunState.RUNNING and run.step_no == 2


def test_a_step_breakpoint_stops_after_that_step_and_a_past_one_is_refused() -> None:
    with _scenario() as run:
        run.run(until=Breakpoint.step(3))
        assert run.step_no == 3 and (run.workspace / "report.md").exists()
        with pytest.raises(ValueError, match="step 2 is past") as caught:
            run.run(until=Breakpoint.step(2))
        assert "\n" not in str(caught.value) and run.step_no == 3, "nothing stepped"


def test_a_verdict_breakpoint_stops_after_the_validated_finish() -> None:
    with _scenario() as run:
        run.run(until=Breakpoint.verdict(accepted=False))
        last = run.records[-1]
        assert run.step_no == 4 and last.verdict is not None and not last.verdict.accepted
    with _scenario() as run:
        assert run.run(until=Breakpoint.verdict(accepted=True)) is RunState.EXHAUSTED, "never accepted: runs on"
    with _scenario("conforming_report") as run:
        run.run(until=Breakpoint.verdict())
        assert run.records[-1].verdict is not None and run.records[-1].verdict.accepted


def _thinker(tmp_path: Path, max_decisions: int) -> Run:
    contract = load_contract(data_dir() / "contracts" / "report_task.yaml").with_budget(
        max_decisions=max_decisions, max_tool_calls=max_decisions, max_tokens=None, wall_clock_seconds=None)
    thoughts: list[Any] = [{"kind": "think", "thought": f"thought {i}"} for i in range(max_decisions)]
    return Run(contract=contract, proposer=ScriptedProposer(thoughts),
               evidence=EvidenceCatalogue.from_dir(data_dir() / "evidence"), workspace=tmp_path / "ws")


def test_a_budget_breakpoint_stops_at_the_first_step_reaching_the_fraction(tmp_path: Path) -> None:
    with _thinker(tmp_path, 10) as run:
        run.run(until=Breakpoint.budget(0.5))
        assert run.step_no == 5 and run.usage.decisions == 5 and spent_fraction(run) == 0.5
        run.run(until=Breakpoint.budget(0.75))
        assert run.usage.decisions == 8, "0.7 is short of 0.75: the stop is the step that reaches it"


def test_a_callable_is_given_each_step_record() -> None:
    seen: list[int] = []

    def wrote(record: Any) -> bool:
        seen.append(record.step)
        return record.proposal is not None and record.proposal.describe().startswith("write_report")

    with _scenario() as run:
        run.run(until=wrote)
        assert run.step_no == 3 and seen == [1, 2, 3]


def test_the_first_of_several_breakpoints_met_stops_the_run() -> None:
    with _scenario() as run:
        run.run(until=[Breakpoint.step(4), Breakpoint.tool("write_report"), RunState.EXHAUSTED])
        assert run.step_no == 2
        run.run(until=[Breakpoint.step(4), Breakpoint.tool("write_report"), RunState.EXHAUSTED])
        assert run.step_no == 4


@pytest.mark.parametrize(("make", "names"), [
    (lambda: Breakpoint.tool("write_reprot"), "unknown tool kind 'write_reprot'"),
    (lambda: Breakpoint.state("DONE"), "unknown run state 'DONE'"),
    (lambda: Breakpoint.step(0), "got 0"),
    (lambda: Breakpoint.budget(1.5), "got 1.5"),
    (lambda: Breakpoint.budget(float("nan")), "got nan"),
    (lambda: Breakpoint.verdict(accepted="no"), "got 'no'"),  # type: ignore[arg-type]
])
def test_a_bad_breakpoint_is_one_line_naming_the_value(make: Any, names: str) -> None:
    with pytest.raises(ValueError, match=names) as caught:
        make()
    assert "\n" not in str(caught.value)


def test_an_until_that_is_no_breakpoint_is_refused_before_any_step() -> None:
    with _scenario() as run:
        with pytest.raises(ValueError, match="got 'RUNNING'"):
            run.run(until="RUNNING")  # type: ignore[arg-type]
        assert run.step_no == 0
