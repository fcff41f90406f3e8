"""Adversarial inputs to the step loop, the proposal parser and the fault schedule (a user's review)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from loophelpers import CONFORMING, READ_A, READ_B, READ_C, READ_D, contract, evidence, make_run

from harness_lab.clock import FakeClock
from harness_lab.errors import RunStateError, SimulatedCrash
from harness_lab.faults import BudgetSqueeze, CrashPoint, ProcessCrash, StaleContext, ToolTimeout
from harness_lab.loop.executor import Outbox
from harness_lab.loop.run import Run
from harness_lab.proposers import FunctionProposer, ProposerOutput, ScriptedProposer
from harness_lab.records.actions import ReadFile, WriteFile
from harness_lab.records.proposal import Proposal, parse_proposal
from harness_lab.records.states import RunState
from harness_lab.store import InMemoryStore


def _deep(levels: int) -> dict[str, Any]:
    root: dict[str, Any] = {"kind": "push"}
    node = root
    for _ in range(levels):
        node["a"] = {}
        node = node["a"]
    return root


class _BadRepr:
    def __repr__(self) -> str:
        raise RuntimeError("repr broke")


class _BrokenMapping(dict):  # type: ignore[type-arg]
    def get(self, *args: object) -> object:
        raise RuntimeError("get broke")


@pytest.mark.parametrize("raw", [
    _deep(100_000),
    {"kind": "write_report", "text": "x", "extra": _deep(100_000)},
    _BadRepr(),
    {"kind": "finish", "note": _BadRepr()},
    {"kind": "push", "what": _BadRepr()},
    _BrokenMapping(kind="finish"),
], ids=["deep-gated", "deep-claim", "bad-repr", "bad-repr-claim", "bad-repr-gated-arg", "broken-mapping"])
def test_parse_proposal_never_raises_on_hostile_structures(raw: object) -> None:
    proposal = parse_proposal(raw)  # the docstring's promise: never raises
    assert proposal.canonical and proposal.args_sha256
    assert proposal.describe()


def test_an_unprintable_argument_hashes_the_same_each_time() -> None:
    # What a human approves is bound by the hash: it must not depend on where the object lives.
    first, second = parse_proposal({"kind": "push", "what": _BadRepr()}), parse_proposal({"kind": "push", "what": _BadRepr()})
    assert first.args_sha256 == second.args_sha256 and "repr failed" in first.canonical


@pytest.mark.parametrize("tokens", [-5, float("nan"), float("inf"), 2.5, "5", True])
def test_a_proposer_output_with_a_bad_token_count_is_refused_at_construction(tokens: object) -> None:
    # -5 credited the budget, NaN switched the token budget off (nan >= limit is never true),
    # "5" crashed the step half-way with a TypeError.
    with pytest.raises(ValueError, match=r"ProposerOutput\.tokens: .*" + repr(tokens).replace("(", r"\(")[:3]):
        ProposerOutput({"kind": "think", "thought": "x"}, tokens=tokens)  # type: ignore[arg-type]


def test_a_proposer_output_takes_a_plain_token_count() -> None:
    assert ProposerOutput({"kind": "finish"}, tokens=0).tokens == 0
    assert ProposerOutput({"kind": "finish"}).tokens is None


def _function_run(tmp_path: Path, fn: Any) -> Run:
    return Run(contract=contract(), evidence=evidence(), proposer=FunctionProposer(fn), workspace=tmp_path / "ws")


def test_a_proposer_that_raises_stops_the_run_with_a_recorded_step(tmp_path: Path) -> None:
    # Before: step() raised out of the middle of the step: step_no had moved on with no record, so
    # the trace skipped a step number, and the next step() asked the broken proposer again.
    def broken(view: object) -> object:
        raise RuntimeError("model down")

    run = _function_run(tmp_path, broken)
    record = run.step()
    assert record.step == 1 and [r.step for r in run.records] == [1]
    assert record.proposal is None and record.decision.verdict == "block"
    assert run.state is RunState.BLOCKED and run.stop_reason is not None
    assert run.stop_reason.code == "proposer_error" and "RuntimeError: model down" in run.stop_reason.message
    assert "Traceback" not in record.decision.reason
    assert run.usage.decisions == 0 and run.usage.tool_calls == 0
    with pytest.raises(RunStateError, match="BLOCKED"):
        run.step()


def test_a_proposer_output_with_a_bad_count_is_a_proposer_error(tmp_path: Path) -> None:
    run = _function_run(tmp_path, lambda view: ProposerOutput({"kind": "think", "thought": "x"}, tokens=-5))
    run.step()
    assert run.stop_reason is not None and run.stop_reason.code == "proposer_error"
    assert run.usage.tokens == 0, "nothing credited to the budget"


def test_pending_leaves_the_run_untouched_when_the_proposer_raises(tmp_path: Path) -> None:
    def broken(view: object) -> object:
        raise RuntimeError("model down")

    run = _function_run(tmp_path, broken)
    with pytest.raises(RuntimeError, match="model down"):
        _ = run.pending
    assert run.step_no == 0 and run.state is RunState.CREATED and not run.records


@pytest.mark.parametrize(("first", "second"), [("tool_exception", "tool_timeout"), ("tool_exception", "tool_exception"),
                                               ("malformed_proposal", "forbidden_state_write")])
def test_two_faults_at_one_hook_of_one_step_both_fire_and_are_recorded(tmp_path: Path, first: str, second: str) -> None:
    # Before: both were marked fired at step 1, but only the first acted; the second vanished
    # (tool) or was recorded as answered although its replacement overwrote the first's (proposal).
    run = make_run(tmp_path, [READ_A, READ_B, READ_C, READ_D])
    run.inject(first, at_step=1)
    run.inject(second, at_step=1)
    run.run(max_steps=2)
    assert [(f.fault, f.step) for f in run.faults] == [(first, 1), (second, 2)]
    assert not run._faults.armed
    fired = [e.data["fault"] for e in run.events if e.kind == "note" and e.topic == "fault"]
    assert fired == [first, second]


@pytest.mark.parametrize("at_step", [2.5, True, "3"])
def test_inject_refuses_a_step_that_is_not_a_whole_number(tmp_path: Path, at_step: object) -> None:
    # Before: 2.5 was armed (and struck step 3); True was "step True is past".
    run = make_run(tmp_path, [READ_A, READ_B])
    with pytest.raises(ValueError, match=r"at_step: .*whole step number.*" + repr(at_step)[:2]):
        run.inject("tool_timeout", at_step=at_step)  # type: ignore[arg-type]
    assert not run._faults.armed and not run.events


def test_inject_refuses_a_run_that_takes_no_more_steps(tmp_path: Path) -> None:
    # Before: a fault armed on a finished run was accepted and noted as armed, and never fired.
    run = make_run(tmp_path, [{"kind": "set_run_state", "state": "REVIEW_READY"}])
    run.step()
    assert run.state is RunState.BLOCKED
    with pytest.raises(RunStateError, match="BLOCKED.*no more steps"):
        run.inject("tool_timeout")
    assert not run._faults.armed and not [e for e in run.events if e.kind == "note" and e.topic == "fault_armed"]


@pytest.mark.parametrize("value", [float("nan"), float("inf"), [1.0, {"deep": float("-inf")}]])
def test_a_gated_action_with_a_non_finite_number_is_refused(value: object) -> None:
    # Before: the approval request showed the argument as null (JSON has no NaN), its hash was the
    # hash of null, and the action that executed carried NaN: approved was not what executed.
    proposal = parse_proposal({"kind": "push", "remote": "origin", "x": value})
    assert proposal.action is None and proposal.error is not None
    assert proposal.error.code == "bad_arguments" and "push: argument x" in proposal.error.message
    assert "finite" in proposal.error.message


def test_run_command_refuses_an_infinite_timeout() -> None:
    proposal = parse_proposal({"kind": "run_command", "argv": ["ls"], "timeout": float("inf")})
    assert proposal.error is not None and proposal.error.code == "bad_arguments"
    assert "timeout" in proposal.error.message


@pytest.mark.parametrize("point", [CrashPoint.BEFORE_EFFECT, CrashPoint.AFTER_EFFECT])
def test_process_crash_armed_for_the_finish_step_strikes_around_validation(tmp_path: Path, point: CrashPoint) -> None:
    # CrashPoint's promise: validation is the finish step's effect. Before, a crash armed for the
    # finish step never fired: the run ended REVIEW_READY with the fault still armed, unrecorded.
    store = InMemoryStore()
    run = make_run(tmp_path, CONFORMING, store=store)
    run.inject(ProcessCrash(point=point), at_step=4)
    with pytest.raises(SimulatedCrash) as caught:
        run.run()
    assert caught.value.step == 4 and run.crashed is point
    assert [(f.fault, f.step) for f in run.faults] == [("process_crash", 4)]
    resumed = Run.resume(store, run.run_id, proposer=ScriptedProposer(CONFORMING))
    assert resumed.run() is RunState.REVIEW_READY and resumed.receipt is not None


def test_an_approval_after_the_gate_timed_out_executes_nothing(tmp_path: Path) -> None:
    # Before: the timeout was only applied by step(); approve() after the deadline ran the push.
    clock = FakeClock()
    base = contract()
    gated = base.model_copy(update={"human_gate": base.human_gate.model_copy(update={"timeout_seconds": 30})})
    outbox = Outbox()
    run = make_run(tmp_path, [READ_A, {"kind": "push", "ref": "main"}], contract_=gated, clock=clock, effects=outbox)
    run.run()
    assert run.state is RunState.WAITING_FOR_HUMAN
    clock.advance(31)
    record = run.approve(by="ana")
    assert outbox.sent == {} and record.tool_result is None
    assert record.decision.verdict == "rejected" and run.state is RunState.BLOCKED
    assert run.stop_reason is not None and run.stop_reason.code == "human_timeout"
    late = [e for e in record.events if e.kind == "note" and e.topic == "late_approval"]
    assert len(late) == 1 and "ana" in late[0].message
    assert not [e for e in record.events if e.kind == "human_decided"]


@pytest.mark.parametrize("path", ["../outside.txt", "/tmp/harness-lab-review-abs.txt", "a/../../outside.txt", ""])
def test_stale_context_refuses_a_path_outside_the_workspace(tmp_path: Path, path: str) -> None:
    # Before: StaleContext(path="../x") or an absolute path wrote that file, outside the workspace,
    # when the fault fired ("someone edits a workspace file" clobbered any file the user could write).
    with pytest.raises(ValueError, match="path"):
        StaleContext(path=path)


@pytest.mark.parametrize(("make", "field"), [
    (lambda: BudgetSqueeze(tool_calls_left=-3), "tool_calls_left"),
    (lambda: BudgetSqueeze(context_tokens=0), "context_tokens"),
    (lambda: ToolTimeout(seconds=float("nan")), "seconds"),
    (lambda: ToolTimeout(seconds=-1), "seconds"),
])
def test_fault_parameters_out_of_range_are_refused(make: Any, field: str) -> None:
    # Before: BudgetSqueeze(tool_calls_left=-3) cut the budget to a negative number (model_copy
    # does not validate), ToolTimeout(seconds=nan) reported "no answer within nans".
    with pytest.raises(ValueError, match=field):
        make()


def test_stale_context_still_writes_inside(tmp_path: Path) -> None:
    run = make_run(tmp_path, [READ_A, READ_B])
    run.inject(StaleContext(path="sub/notes.md"))
    run.step()
    assert (tmp_path / "ws" / "sub" / "notes.md").exists()


def test_stale_context_does_not_write_through_a_planted_symlink(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    run = make_run(tmp_path, [READ_A, READ_B])
    (tmp_path / "ws" / "link").symlink_to(outside)
    run.inject(StaleContext(path="link/notes.md"))
    run.step()
    assert not (outside / "notes.md").exists()
    assert "nothing written" in run.faults[0].effect


def test_a_crashed_run_neither_asks_its_proposer_nor_takes_edits(tmp_path: Path) -> None:
    # Before: run.pending on a dead run asked the proposer (a paid model call, tokens charged to a run
    # that takes no more steps), and edit_pending recorded an edit no step would ever carry out.
    run = make_run(tmp_path, [READ_A, READ_B, READ_C])
    run.inject(ProcessCrash(point=CrashPoint.AFTER_COMMIT))
    with pytest.raises(SimulatedCrash):
        run.step()
    position, tokens, events = run.proposer.position, run.usage.tokens, len(run.events)  # type: ignore[attr-defined]
    assert run.pending is None
    with pytest.raises(RunStateError, match="crashed"):
        run.edit_pending(READ_D)
    assert run.proposer.position == position and run.usage.tokens == tokens  # type: ignore[attr-defined]
    assert len(run.events) == events


@pytest.mark.parametrize(("args", "kw", "match"), [
    ([READ_A], {"then": "repeat"}, "then: 'repeat'"),
    ("finish", {}, "actions: a list"),
])
def test_a_scripted_proposer_refuses_a_script_it_would_misread(args: Any, kw: dict[str, Any], match: str) -> None:
    # Before: then="repeat" (a typo) silently meant "finish"; a string was proposed one letter a step.
    with pytest.raises(ValueError, match=match):
        ScriptedProposer(args, **kw)


@pytest.mark.parametrize("state", [{"position": -2}, {"position": "x"}, {}, {"position": 1.5}])
def test_a_scripted_proposer_refuses_a_bad_restored_position(state: dict[str, Any]) -> None:
    # Before: position -2 proposed the second-to-last action next; "x" and {} raised bare errors.
    proposer = ScriptedProposer([READ_A, READ_B])
    with pytest.raises(ValueError, match="position"):
        proposer.restore(state)
    assert proposer.position == 0


def test_the_wall_clock_is_checked_again_before_the_tool_call(tmp_path: Path) -> None:
    # Before: the limit was checked only before the proposer was asked; a slow proposer (a model
    # thinking for a minute) took the run past it, and the tool call was made anyway.
    clock = FakeClock()

    def slow(view: object) -> object:
        clock.advance(30)
        return {"kind": "write_file", "path": "late.md", "content": "x"}

    run = Run(contract=contract(wall_clock_seconds=20), evidence=evidence(), proposer=FunctionProposer(slow),
              workspace=tmp_path / "ws", clock=clock)
    record = run.step()
    assert record.tool_result is None and not (tmp_path / "ws" / "late.md").exists()
    assert run.state is RunState.EXHAUSTED and run.stop_reason is not None
    assert run.stop_reason.code == "wall_clock" and "call not made" in run.stop_reason.message


class _Raising:
    def decide(self, request: object) -> object:
        raise ConnectionError("chat service down")


class _SaysTrue:
    def decide(self, request: object) -> object:
        return True


@pytest.mark.parametrize(("approver", "said"), [(_Raising(), "ConnectionError: chat service down"), (_SaysTrue(), "True")])
def test_a_broken_approver_stops_the_run_safely_with_a_record(tmp_path: Path, approver: Any, said: str) -> None:
    # Before: the exception (or the AttributeError on True.approved) escaped step() half-way: the
    # decision was counted and a 'proposed' event emitted for a step that never got a record.
    outbox = Outbox()
    run = make_run(tmp_path, [{"kind": "push", "ref": "main"}], approver=approver, effects=outbox)
    record = run.step()
    assert [r.step for r in run.records] == [1] and record.tool_result is None and outbox.sent == {}
    assert record.decision.verdict == "block" and run.state is RunState.BLOCKED
    assert run.stop_reason is not None and run.stop_reason.code == "approver_error"
    assert said in run.stop_reason.message


def test_a_fault_the_run_ends_before_reaching_is_reported_unfired(tmp_path: Path) -> None:
    # A tool fault armed for the finish step waits for a tool call that never comes. Before, the
    # trace held only 'fault_armed': nothing said the fault never struck.
    run = make_run(tmp_path, CONFORMING)
    run.inject("tool_timeout", at_step=4)
    assert run.run() is RunState.REVIEW_READY
    assert run.faults == [] and not run._faults.armed
    unfired = [e for e in run.records[-1].events if e.kind == "note" and e.topic == "fault_unfired"]
    assert len(unfired) == 1 and unfired[0].data["fault"] == "tool_timeout"
    assert "never fired" in unfired[0].message and "REVIEW_READY" in unfired[0].message


@pytest.mark.parametrize("point", [CrashPoint.BEFORE_COMMIT, CrashPoint.AFTER_COMMIT])
def test_a_crash_due_at_the_last_steps_commit_still_strikes(tmp_path: Path, point: CrashPoint) -> None:
    run = make_run(tmp_path, CONFORMING)
    run.inject(ProcessCrash(point=point), at_step=4)
    with pytest.raises(SimulatedCrash):
        run.run()
    assert [(f.fault, f.step) for f in run.faults] == [("process_crash", 4)]
    assert not [e for e in run.events if e.kind == "note" and e.topic == "fault_unfired"]


def _cyclic(raw: dict[str, Any]) -> dict[str, Any]:
    raw["self"] = raw
    return raw


@pytest.mark.parametrize("raw", [_cyclic({"kind": "push", "ref": "main"}), _cyclic({"kind": "read_file", "path": "a.md"}),
                                 _cyclic({"kind": "run_command", "argv": ["ls"]})])
def test_a_proposal_with_a_cyclic_value_keeps_a_raw_that_reads_back_the_same(raw: dict[str, Any]) -> None:
    # Before: the whole raw became one repr string, so the trace's raw was not the action taken,
    # and a parked one (re-read from raw by rollback or resume) could never be approved.
    proposal = parse_proposal(raw)
    assert proposal.action is not None and isinstance(proposal.raw, dict)
    again = parse_proposal(proposal.raw)
    assert again.action == proposal.action and again.args_sha256 == proposal.args_sha256


def test_a_parked_cyclic_proposal_can_be_approved_after_a_rollback(tmp_path: Path) -> None:
    outbox = Outbox()
    run = make_run(tmp_path, [READ_A, _cyclic({"kind": "push", "ref": "main"})], effects=outbox)
    run.run()
    run.rollback(run.sandbox.snapshots()[-1].id)
    assert run.approve().tool_result is not None and len(outbox.sent) == 1


def test_a_proposal_object_is_judged_by_its_raw(tmp_path: Path) -> None:
    # Before: a proposer returning a hand-built Proposal whose raw said read_file but whose action
    # was write_file got the write executed while the trace (and a checkpoint's pending) said read.
    liar = Proposal(raw={"kind": "read_file", "path": "notes.md"}, action=WriteFile(path="evil.md", content="x"))
    assert parse_proposal(liar).action == ReadFile(path="notes.md")
    run = _function_run(tmp_path, lambda view: liar)
    record = run.step()
    assert record.proposal is not None and record.proposal.describe() == "read_file(path='notes.md')"
    assert not (tmp_path / "ws" / "evil.md").exists()


def test_halt_with_a_bad_reason_changes_nothing(tmp_path: Path) -> None:
    # Before: the stop reason was built after the step was opened and the waiting request dropped,
    # so halt(None, ...) raised with step_no moved on and the human gate gone.
    run = make_run(tmp_path, [{"kind": "push", "ref": "main"}])
    run.step()
    with pytest.raises(ValueError, match="code"):
        run.halt(None, "stop")  # type: ignore[arg-type]
    assert run.step_no == 1 and run.waiting is not None and run.state is RunState.WAITING_FOR_HUMAN
    assert run.halt("operator", "stop now").decision.verdict == "block" and run.state is RunState.BLOCKED


@pytest.mark.parametrize("call", [lambda run: run.reject(None), lambda run: run.reject("no", by=None),
                                  lambda run: run.approve(by=None)])
def test_approve_or_reject_with_bad_input_changes_nothing(tmp_path: Path, call: Any) -> None:
    # Before: the trace event was built after the step opened and the request was dropped: the
    # error left the run WAITING_FOR_HUMAN with nothing waiting, so it could be neither approved nor stepped.
    outbox = Outbox()
    run = make_run(tmp_path, [{"kind": "push", "ref": "main"}], effects=outbox)
    run.step()
    with pytest.raises(ValueError, match="reason|by"):
        call(run)
    assert run.step_no == 1 and run.waiting is not None and outbox.sent == {}
    assert run.approve().tool_result is not None
