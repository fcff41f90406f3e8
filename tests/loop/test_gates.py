"""Loop gates outside the model: budgets before the call, the 80% warning, wall clock, convergence."""

from __future__ import annotations

import posixpath

from hypothesis import given, settings
from hypothesis import strategies as st
from loophelpers import (
    FINISH,
    READ_A,
    READ_B,
    READ_C,
    READ_D,
    WRITE_GOOD,
    contract,
    evidence,
    make_run,
    notes,
)

from harness_lab.clock import FakeClock
from harness_lab.contract import Budget
from harness_lab.loop.gates import LoopGates
from harness_lab.loop.run import Run
from harness_lab.proposers import ProposerOutput
from harness_lab.records.proposal import parse_proposal
from harness_lab.records.states import RunState


class Counting:
    def __init__(self, actions, tokens: int | None = None) -> None:
        self.actions, self.tokens, self.calls = list(actions), tokens, 0

    def propose(self, view):
        raw = self.actions[min(self.calls, len(self.actions) - 1)]
        self.calls += 1
        return ProposerOutput(raw, tokens=self.tokens) if self.tokens is not None else raw


def _run(tmp_path, proposer, clock=None, **budget) -> Run:
    return Run(contract=contract(**budget), evidence=evidence(), proposer=proposer, workspace=tmp_path / "ws",
               clock=clock)


def test_token_warning_at_80_percent_is_injected_once(tmp_path) -> None:
    run = _run(tmp_path, Counting([READ_A, READ_B, READ_C, READ_D, READ_A], tokens=30), max_tokens=150)
    records = [run.step() for _ in range(4)]
    warned = [r.step for r in records if notes(r, "budget_warning")]
    assert warned == [4], "120/150 tokens is the first step at or over 80%"
    view = run.context.view().render()
    assert view.count("budget warning") == 1 and "converge and finish" in view
    assert run.step().decision.verdict == "execute"  # 120 < 150: the budget is not spent yet
    run.step()
    assert run.state is RunState.EXHAUSTED and run.stop_reason.code == "token_budget"  # type: ignore[union-attr]
    assert not any(notes(r, "budget_warning") for r in run.records[4:])


def test_wall_clock_limit_with_a_fake_clock(tmp_path) -> None:
    clock = FakeClock()
    proposer = Counting([READ_A, READ_B, READ_C])
    run = _run(tmp_path, proposer, clock=clock, wall_clock_seconds=10)
    run.step()
    clock.advance(9)
    assert run.step().decision.verdict == "execute"
    clock.advance(1.5)
    record = run.step()
    assert run.state is RunState.EXHAUSTED and run.stop_reason.code == "wall_clock"  # type: ignore[union-attr]
    assert record.proposal is None and proposer.calls == 2, "checked before the proposer is asked"
    assert record.usage.elapsed_s == 10.5


def test_decision_budget_is_checked_before_asking(tmp_path) -> None:
    proposer = Counting([READ_A, READ_B, READ_C])
    run = _run(tmp_path, proposer, max_decisions=2)
    run.run()
    assert run.state is RunState.EXHAUSTED and run.stop_reason.code == "decision_budget"  # type: ignore[union-attr]
    assert proposer.calls == 2 and run.usage.decisions == 2


def test_tool_budget_is_checked_before_the_call(tmp_path) -> None:
    run = _run(tmp_path, Counting([READ_A, READ_B, READ_C]), max_tool_calls=2)
    run.run()
    assert run.state is RunState.EXHAUSTED and run.stop_reason.code == "tool_budget"  # type: ignore[union-attr]
    assert run.usage.tool_calls == 2 and "budget-gates" not in run.executor.observed


def test_convergence_third_identical_call_hint_then_stop(tmp_path) -> None:
    run = make_run(tmp_path, [READ_A])  # repeats the same read forever
    first, second, third = run.step(), run.step(), run.step()
    assert (first.decision.verdict, second.decision.verdict) == ("execute", "execute")
    assert third.decision.verdict == "refuse" and "change approach" in run.context.view().render()
    fourth = run.step()
    assert fourth.decision.verdict == "block" and run.state is RunState.BLOCKED
    assert run.stop_reason.code == "no_progress" and run.usage.tool_calls == 2  # type: ignore[union-attr]


def test_changing_approach_after_the_hint_goes_on(tmp_path) -> None:
    run = make_run(tmp_path, [READ_A, READ_A, READ_A, READ_B, READ_C])
    verdicts = [run.step().decision.verdict for _ in range(5)]
    assert verdicts == ["execute", "execute", "refuse", "execute", "execute"]
    assert run.state is RunState.RUNNING


def test_near_identical_arguments_count_as_the_same_call(tmp_path) -> None:
    def write(n: int) -> dict:
        return {"kind": "write_file", "path": "notes.md", "content": "a long and stable note body " * 4 + str(n)}

    run = make_run(tmp_path, [write(1), write(2), write(3)])
    assert [run.step().decision.verdict for _ in range(3)] == ["execute", "execute", "refuse"]


def test_a_rewrite_after_validation_feedback_is_not_a_loop(tmp_path) -> None:
    bad = dict(WRITE_GOOD, text=WRITE_GOOD["text"].replace("Test material only.", ""))
    run = make_run(tmp_path, [READ_A, READ_B, bad, FINISH, bad, FINISH, WRITE_GOOD, FINISH])
    run.run()
    assert run.state is RunState.REVIEW_READY, "write/finish/write/finish/write is not three in a row"
    assert all(r.decision.verdict != "refuse" for r in run.records)


_PATHS = st.text(alphabet="abc de/x.", max_size=40)


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(["read_file", "write_file"]), st.sampled_from(["read_file", "write_file"]), _PATHS, _PATHS)
def test_two_kinds_or_two_files_are_never_the_same_call(kind_a, kind_b, path_a, path_b) -> None:
    """The call's kind and target decide first: only one kind on one file (however spelled) can repeat,
    however alike two paths look. (This replaced a test of the old rule, which compared the whole
    call's JSON by similarity, so that writing "src/a.py" then "src/b.py" was the same call.)"""
    def raw(kind: str, path: str) -> dict:
        return {"kind": kind, "path": path, **({"content": "the same text"} if kind == "write_file" else {})}

    a, b = parse_proposal(raw(kind_a, path_a)), parse_proposal(raw(kind_b, path_b))
    gates = LoopGates(Budget(), FakeClock(), repeat_limit=2)  # the second of two alike calls is the hint
    verdicts = [gates.convergence(a, 1), gates.convergence(b, 2)]
    same = a.canonical == b.canonical or (a.action is not None and b.action is not None and kind_a == kind_b
                                          and posixpath.normpath(path_a) == posixpath.normpath(path_b))
    assert verdicts == ["ok", "hint" if same else "ok"]
