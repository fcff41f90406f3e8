"""One test per catalogue fault: what the harness answers, and that no fault ends in success silently."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, overload

import pytest
from loophelpers import (
    CONFORMING,
    FINISH,
    READ_A,
    READ_B,
    READ_C,
    READ_D,
    WRITE_GOOD,
    contract,
    make_run,
    notes,
)
from pydantic import ValidationError

from harness_lab.errors import RunStateError, SimulatedCrash
from harness_lab.faults import (
    CrashPoint,
    PathEscape,
    ProcessCrash,
    fault_catalogue,
    fault_names,
    resolve_fault,
)
from harness_lab.loop.record_log import RecordLog
from harness_lab.records.events import Event, Note
from harness_lab.records.states import RunState

SPEC_FAULTS = {
    "tool_exception", "tool_timeout", "empty_result", "artifact_changed_after_validation", "stale_context",
    "budget_squeeze", "repeated_action_loop", "forbidden_state_write", "path_escape",
    "summary_drops_anomaly", "process_crash", "malformed_proposal",
}


def _fired(run, name: str):
    hits = [f for f in run.faults if f.fault == name]
    assert hits, f"{name} never fired"
    return hits


# -- the catalogue as a value -------------------------------------------------------------------

def test_catalogue_holds_the_twelve_spec_faults_each_documented_and_frozen() -> None:
    catalogue = fault_catalogue()
    assert set(catalogue) == SPEC_FAULTS and fault_names() == tuple(catalogue)
    for name, fault in catalogue.items():
        assert fault.name == name and fault.kind == "fault"
        assert len(type(fault).doc()) > 20, f"{name} has no one-line documentation"
        with pytest.raises(ValidationError):
            fault.steps = 9  # type: ignore[misc]
    with pytest.raises(TypeError):
        catalogue["tool_exception"] = catalogue["tool_timeout"]  # type: ignore[index]
    assert fault_catalogue() is not catalogue, "built fresh by a function, not a shared registry"


def test_unknown_fault_and_past_step_are_misuse(tmp_path) -> None:
    with pytest.raises(ValueError, match="unknown fault 'gremlins'"):
        resolve_fault("gremlins")
    run = make_run(tmp_path, [READ_A])
    run.step()
    with pytest.raises(ValueError, match="past"):
        run.inject("tool_timeout", at_step=1)


def test_a_fault_strikes_the_chosen_step_not_earlier(tmp_path) -> None:
    run = make_run(tmp_path, [READ_A, READ_B, READ_C])
    run.inject("tool_timeout", at_step=3)
    assert [run.step().tool_result.status for _ in range(3)] == ["ok", "ok", "timeout"]  # type: ignore[union-attr]
    assert [f.step for f in run.faults] == [3]
    assert notes(run.records[0], "fault_armed"), "arming is in the trace of the next step"


# -- one test per fault ----------------------------------------------------------------------

def test_tool_exception_becomes_a_structured_retryable_error(tmp_path) -> None:
    run = make_run(tmp_path, [READ_A, READ_B])
    run.inject("tool_exception")
    record = run.step()
    result = record.tool_result
    assert result is not None and result.status == "error" and result.retryable
    assert "RuntimeError" in (result.reason or "") and result.hint
    assert set(result.for_model()) == {"status", "tool", "reason", "hint", "retryable", "exit_status"}
    assert "Traceback" not in run.context.view().render()
    assert "harness-boundary" not in run.executor.observed, "a failed read is not evidence"
    assert run.state is RunState.RUNNING and notes(record, "fault") and notes(record, "fault_answer")
    assert "tool error" in _fired(run, "tool_exception")[0].answer


def test_tool_timeout_is_a_timeout_result_not_a_success(tmp_path) -> None:
    run = make_run(tmp_path, [READ_A])
    run.inject("tool_timeout")
    record = run.step()
    assert record.tool_result is not None and record.tool_result.status == "timeout"
    assert record.tool_result.retryable and not record.tool_result.ok
    assert "harness-boundary" not in run.executor.observed and run.state is RunState.RUNNING
    assert "tool timeout" in _fired(run, "tool_timeout")[0].answer


def test_empty_result_waits_for_a_read_and_is_reported_as_an_error(tmp_path) -> None:
    run = make_run(tmp_path, [{"kind": "write_file", "path": "n.md", "content": "x"}, READ_A])
    run.inject("empty_result")
    assert run.step().tool_result.ok  # type: ignore[union-attr]  # a write: the fault waits
    record = run.step()
    assert record.tool_result is not None and record.tool_result.status == "error"
    assert "empty result" in (record.tool_result.reason or "")
    assert "harness-boundary" not in run.executor.observed
    assert [f.step for f in run.faults] == [2]


def test_artifact_changed_after_validation_is_not_accepted(tmp_path) -> None:
    run = make_run(tmp_path, CONFORMING)  # then: finish again
    run.inject("artifact_changed_after_validation", at_step=4)
    run.run(max_steps=4)
    record = run.records[-1]
    assert record.verdict is not None and record.verdict.accepted, "the validated bytes did pass"
    assert run.state is RunState.RUNNING and run.receipt is None and run.accepted_bytes is None
    assert notes(record, "artifact_changed")
    assert "changed after it was validated" in run.context.view().render()
    run.step()  # finish again: the new bytes are validated and bound
    assert run.state is RunState.REVIEW_READY and run.receipt is not None
    on_disk = (run.workspace / "report.md").read_bytes()
    assert b"Edited after validation" in on_disk
    assert run.receipt.artifact_sha256 == hashlib.sha256(on_disk).hexdigest() == hashlib.sha256(run.accepted_bytes or b"").hexdigest()


def test_stale_context_is_detected_marked_and_reselected(tmp_path) -> None:
    run = make_run(tmp_path, [{"kind": "write_file", "path": "notes.md", "content": "figure: 42"},
                              {"kind": "read_file", "path": "notes.md"}, READ_A, READ_B])
    run.step()
    run.step()
    assert "figure: 42" in run.context.view().render()
    assert not any(notes(r, "external_change") for r in run.records), "the run's own writes are not external"
    run.inject("stale_context")
    record = run.step()
    change = notes(record, "external_change")
    assert change and len(change[0].data["stale"]) >= 2
    view = run.context.view().render()
    assert "figure: 42" not in view, "stale observations left the view"
    assert "changed outside the run" in view and run.state is RunState.RUNNING
    assert "changed outside the run" in _fired(run, "stale_context")[0].answer
    assert all(run.context.item(i).freshness == "stale" for i in change[0].data["stale"])


def test_budget_squeeze_stops_before_the_next_tool_call(tmp_path) -> None:
    run = make_run(tmp_path, [READ_A, READ_B, READ_C])
    run.step()
    run.inject("budget_squeeze")
    record = run.step()
    assert run.state is RunState.EXHAUSTED and run.stop_reason is not None
    assert run.stop_reason.code == "tool_budget" and "call not made" in run.stop_reason.message
    assert record.tool_result is None and run.usage.tool_calls == 1
    assert "acceptance-snapshot" not in run.executor.observed


def test_repeated_action_loop_is_hinted_on_the_third_call_then_stopped(tmp_path) -> None:
    run = make_run(tmp_path, [READ_A, READ_B, READ_C, READ_D])
    run.step()
    run.inject("repeated_action_loop")
    second, third, fourth = run.step(), run.step(), run.step()
    assert second.decision.verdict == "execute"
    assert third.decision.verdict == "refuse" and "change approach" in third.decision.reason
    assert fourth.decision.verdict == "block" and run.state is RunState.BLOCKED
    assert run.stop_reason is not None and run.stop_reason.code == "no_progress"
    assert [f.step for f in run.faults] == [2, 3, 4]
    assert run.usage.tool_calls == 2, "the refused and the blocked repeats never ran"


def test_forbidden_state_write_blocks(tmp_path) -> None:
    run = make_run(tmp_path, [READ_A])
    run.inject("forbidden_state_write")
    record = run.step()
    assert record.decision.verdict == "block" and run.state is RunState.BLOCKED
    assert run.stop_reason is not None and run.stop_reason.code == "forbidden_action"
    assert record.tool_result is None


@pytest.mark.parametrize("via", ["symlink", "dotdot"])
def test_path_escape_is_denied(tmp_path, via: str) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("TOP-SECRET-TOKEN")
    run = make_run(tmp_path, [READ_A])
    run.inject(PathEscape(via=via, outside=str(outside), file="secret.txt"))  # type: ignore[arg-type]
    record = run.step()
    assert record.tool_result is not None and record.tool_result.status == "denied"
    assert "TOP-SECRET-TOKEN" not in run.context.view().render()
    assert run.state is RunState.RUNNING and "tool denied" in _fired(run, "path_escape")[0].answer


def test_summary_dropping_an_anomaly_is_caught_by_the_self_check(tmp_path) -> None:
    anomaly = "HTTP 200 but body code 500"
    run = make_run(tmp_path, [{"kind": "write_file", "path": "api.log", "content": f"status: {anomaly}\n"},
                              {"kind": "read_file", "path": "api.log"}, READ_A, READ_B, READ_C, READ_D, READ_A])
    run.run(max_steps=7)  # the read of api.log is now older than the last 3 interactions (L4)
    run.inject("summary_drops_anomaly")
    run.step()
    report = run.context.last_report
    assert report is not None and report.fired and report.repinned
    view = run.context.view().render()
    assert "all calls succeeded" in view, "the faulty summary is in the view"
    assert anomaly in view, "and the anomaly is still there verbatim"
    assert "self-check fired" in _fired(run, "summary_drops_anomaly")[0].answer


@pytest.mark.parametrize("point", list(CrashPoint))
def test_process_crash_raises_at_its_point_and_kills_the_run(tmp_path, point: CrashPoint) -> None:
    run = make_run(tmp_path, [READ_A, {"kind": "write_file", "path": "out.md", "content": "x"}])
    run.step()
    run.inject(ProcessCrash(point=point))
    with pytest.raises(SimulatedCrash) as caught:
        run.step()
    assert caught.value.point == point.value and caught.value.step == 2 and run.crashed is point
    assert (tmp_path / "ws" / "out.md").exists() is (point is not CrashPoint.BEFORE_EFFECT)
    assert len(run.records) == (2 if point is CrashPoint.AFTER_COMMIT else 1)
    record = _fired(run, "process_crash")[0]
    assert record.state_after is None and "SimulatedCrash" in record.answer
    assert any(e.kind == "note" and e.topic == "fault" for e in run.events)
    with pytest.raises(RunStateError, match="crashed"):
        run.step()


def test_process_crash_waits_for_a_step_with_an_effect(tmp_path) -> None:
    run = make_run(tmp_path, [{"kind": "teleport"}, READ_A])
    run.inject(ProcessCrash(point=CrashPoint.BEFORE_EFFECT))
    assert run.step().decision.verdict == "refuse"  # no effect in this step: no crash point reached
    with pytest.raises(SimulatedCrash):
        run.step()


def test_malformed_proposal_is_refused_and_fed_back(tmp_path) -> None:
    run = make_run(tmp_path, [READ_A])
    run.inject("malformed_proposal")
    record = run.step()
    assert record.decision.verdict == "refuse" and record.proposal is not None
    assert record.proposal.error is not None and record.proposal.error.code == "malformed"
    assert "a proposal must be a mapping" in run.context.view().render()
    assert run.state is RunState.RUNNING and run.usage.tool_calls == 0


# -- across the catalogue ----------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(SPEC_FAULTS - {"process_crash"}))
@pytest.mark.parametrize("at_step", [1, 3, 4])
def test_no_fault_ends_in_success_silently(tmp_path, name: str, at_step: int) -> None:
    run = make_run(tmp_path, [*CONFORMING, READ_C, FINISH])
    run.inject(name, at_step=at_step)
    run.run(max_steps=8)
    fired = [f for f in run.faults if f.fault == name]
    if fired:
        assert all(f.answer and f.effect for f in fired)
        assert any(e.kind == "note" and e.topic == "fault_answer" for r in run.records for e in r.events)
    if run.state is RunState.REVIEW_READY:
        on_disk = (run.workspace / "report.md").read_bytes()
        assert run.receipt is not None and run.receipt.artifact_sha256 == hashlib.sha256(on_disk).hexdigest()
        assert not any(f.success_state and not f.answer for f in run.faults)
    else:
        assert run.receipt is None


def test_a_timed_out_read_is_not_evidence_for_a_later_finish(tmp_path) -> None:
    run = make_run(tmp_path, [READ_A, READ_B, WRITE_GOOD, FINISH])
    run.inject("tool_timeout", at_step=1)
    run.run()
    # The timed-out read is not evidence, so the report cites something never read.
    assert run.state is not RunState.REVIEW_READY
    assert any(r.verdict is not None and "citation_not_read" in {e.code for e in r.verdict.errors} for r in run.records)


def test_cli_lists_the_catalogue_one_line_each(capsys) -> None:
    from harness_lab.cli import main

    assert main(["faults"]) == 0
    lines = capsys.readouterr().out.splitlines()
    catalogue = fault_catalogue()
    assert [line.split()[0] for line in lines] == list(catalogue)
    for line, fault in zip(lines, catalogue.values(), strict=True):
        assert line.endswith(type(fault).doc())


@pytest.mark.parametrize("tool", ["think", "read_file", "write_file"])
def test_an_outside_write_while_the_proposer_thinks_is_reported(tmp_path, tool: str) -> None:
    # The proposer is asked inside step(), after the step's own check of the workspace: a write by
    # someone else during that call (a model's seconds) must not be folded into the run's own state.
    # A step that writes reports it before its own write; any other step leaves it to the next one.
    run = make_run(tmp_path, [{"kind": "write_file", "path": "notes.md", "content": "figure: 42"},
                              {"kind": "read_file", "path": "notes.md"}, READ_A, READ_B])
    run.step()
    run.step()
    assert "figure: 42" in run.context.view().render()
    ask = run.proposer.propose

    def propose_while_someone_writes(view: object) -> object:
        (run.workspace / "notes.md").write_text("figure: 43")  # the outside world, mid-step
        return {"think": {"kind": "think", "thought": "next"}, "read_file": {"kind": "read_file", "path": "other.md"},
                "write_file": {"kind": "write_file", "path": "other.md", "content": "x"}}[tool]

    run.proposer.propose = propose_while_someone_writes  # type: ignore[method-assign]
    during = run.step()
    run.proposer.propose = ask  # type: ignore[method-assign]
    after = run.step()
    assert bool(notes(during, "external_change")) == (tool == "write_file")
    change = notes(during if tool == "write_file" else after, "external_change")
    assert change and change[0].data["stale"], "the outside write is reported, the old reading marked stale"
    assert "figure: 42" not in run.context.view().render()


# -- what a fault's answer reads of a long run ---------------------------------------------------------
class _Reads(Sequence[Event]):
    """A run's events that note the lowest index read."""

    def __init__(self, events: list[Event]) -> None:
        self.events, self.lowest = events, len(events)

    def __len__(self) -> int:
        return len(self.events)

    @overload
    def __getitem__(self, index: int) -> Event: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Event]: ...

    def __getitem__(self, index: int | slice) -> Event | Sequence[Event]:
        if isinstance(index, slice):
            raise AssertionError("a fault's answer slices no run's events")
        self.lowest = min(self.lowest, index % len(self.events))
        return self.events[index]


@pytest.mark.parametrize(("name", "topic"), [("stale_context", "external_change"),
                                             ("artifact_changed_after_validation", "artifact_changed")])
def test_a_fault_answer_reads_only_the_steps_own_events(name: str, topic: str) -> None:
    """10,000 steps of events before this one: the answer names this step's last note on its topic and reads
    back at most to the previous step's last event (it read them all: a long run's packed events unpacked)."""
    old = [Note(seq=i + 1, step=1 + i // 2, topic=topic if i % 2 else "other", message=f"old {i}")
           for i in range(20_000)]
    step = old[-1].step + 1
    mine = [Note(seq=20_001, step=step, topic=topic, message="first"),
            Note(seq=20_002, step=step, topic="other", message="x"),
            Note(seq=20_003, step=step, topic=topic, message="this step's last")]
    events = _Reads([*old, *mine])
    run: Any = type("Target", (), {"events": events, "step_no": step, "records": [1]})()
    assert "this step's last" in resolve_fault(name).answer(run)
    assert events.lowest >= len(old) - 1
    run.step_no = step + 1  # a step without such a note: none of the old ones is taken for it
    assert "NOT detected" in resolve_fault(name).answer(run)


def test_a_fault_armed_late_in_a_long_run_unpacks_no_packed_event(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    run = make_run(tmp_path, [{"kind": "write_file", "path": "notes.md", "content": "figure: 42"},
                              {"kind": "read_file", "path": "notes.md"},
                              *[{"kind": "think", "thought": "a"}, {"kind": "think", "thought": "b"}] * 250],
                   contract_=contract(max_decisions=1_000, max_tool_calls=1_000, max_tokens=None))
    for _ in range(400):
        run.step()
    assert isinstance(run.events, RecordLog) and run.events.packed >= 512
    unpacked: list[int] = []
    chunk = RecordLog._chunk

    def counted(log: RecordLog[Any], number: int) -> list[Any]:
        unpacked.append(number)
        return chunk(log, number)

    monkeypatch.setattr(RecordLog, "_chunk", counted)
    run.inject("stale_context")
    record = run.step()
    assert notes(record, "external_change")
    assert "changed outside the run" in _fired(run, "stale_context")[0].answer
    assert unpacked == []
    run.close()
