"""Approve with changes: what executes is exactly the edited, approved call, recorded as such, once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from runhelpers import CountingOutbox

from harness_lab import Run, RunState
from harness_lab.contract import load_contract
from harness_lab.errors import RunStateError, SimulatedCrash
from harness_lab.evidence import EvidenceCatalogue
from harness_lab.faults import CrashPoint, ProcessCrash
from harness_lab.loop.approval import AskHuman
from harness_lab.loop.executor import Outbox
from harness_lab.paths import data_dir
from harness_lab.persistence.replay import replay_run
from harness_lab.persistence.row_text import dump_step_row
from harness_lab.proposers import ScriptedProposer
from harness_lab.records.actions import GatedAction
from harness_lab.records.events import load_step_row
from harness_lab.records.proposal import parse_proposal
from harness_lab.records.tools import ToolResult
from harness_lab.store import SQLiteStore, Store

PUSH = {"kind": "push", "branch": "main", "message": "ship it"}
READ = {"kind": "read_evidence", "id": "harness-boundary"}
DELETE = {"kind": "delete_file", "path": "report.md"}
WRITE = {"kind": "write_report", "text": "# Report\n"}


def _run(ws: Path, actions: list[dict[str, Any]], effects: Any, store: Store | None = None) -> Run:
    contract = load_contract(data_dir() / "contracts" / "report_task.yaml").with_budget(
        max_decisions=20, max_tool_calls=20, max_tokens=None, wall_clock_seconds=None)
    return Run(contract=contract, proposer=ScriptedProposer(actions), approver=AskHuman(),
               evidence=EvidenceCatalogue.from_dir(data_dir() / "evidence"), workspace=ws, effects=effects,
               run_id="R1", store=store)


def test_approve_edited_executes_exactly_the_edited_call_and_records_both(tmp_path: Path) -> None:
    outbox = Outbox()
    run = _run(tmp_path / "ws", [PUSH, READ], outbox)
    run.step()
    request = run.waiting
    assert request is not None
    record = run.approve(args_sha256=request.args_sha256, edited={"message": "ship it on Monday"})
    (executed,) = outbox.sent.values()
    assert executed.args == {"branch": "main", "message": "ship it on Monday"}, "the edited call ran, not the asked one"
    edited = parse_proposal({**PUSH, "message": "ship it on Monday"})
    assert record.proposal is not None and record.proposal.args_sha256 == edited.args_sha256
    assert record.decision.verdict == "approved" and "with changes" in record.decision.reason
    (decided,) = [e for e in record.events if e.kind == "human_decided"]
    assert decided.edited and decided.approved
    assert decided.args_sha256 == request.args_sha256 and decided.edited_args_sha256 == edited.args_sha256
    assert decided.original_args == request.args
    assert load_step_row(dump_step_row(record)) == record, "the store keeps the edit"
    assert run.state is RunState.RUNNING


def test_an_edit_in_the_requests_own_shape_is_taken_field_by_field(tmp_path: Path) -> None:
    outbox = Outbox()
    run = _run(tmp_path / "ws", [PUSH, READ], outbox)
    run.step()
    assert run.waiting is not None and run.pending is not None
    assert run.pending.arguments == {"branch": "main", "message": "ship it"}, "flat, as proposed"
    shown = run.waiting.args  # what a dashboard shows: {"kind": "push", "args": {...}}
    run.approve(edited={**shown, "args": {**shown["args"], "message": "from the form"}})
    (executed,) = outbox.sent.values()
    assert executed.args == {"branch": "main", "message": "from the form"}


def test_approve_unedited_records_no_edit(tmp_path: Path) -> None:
    run = _run(tmp_path / "ws", [PUSH, READ], Outbox())
    run.step()
    record = run.approve(edited={"message": "ship it"})  # the same value: nothing changed
    (decided,) = [e for e in record.events if e.kind == "human_decided"]
    assert not decided.edited and decided.edited_args_sha256 is None and decided.original_args is None
    assert '"edited"' not in dump_step_row(record), "a plain approval's row reads as before"


@pytest.mark.parametrize(("edit", "names"), [
    ({"mesage": "x"}, "unknown field 'mesage' for push"),
    ({"kind": "release"}, "kind: the tool stays 'push'"),
    ({"message": float("nan")}, "argument message: not a finite number"),
])
def test_an_edit_the_tool_cannot_take_executes_nothing_and_still_waits(tmp_path: Path, edit: dict[str, Any],
                                                                       names: str) -> None:
    outbox = Outbox()
    run = _run(tmp_path / "ws", [PUSH, READ], outbox)
    run.step()
    request, steps = run.waiting, run.step_no
    with pytest.raises(RunStateError, match=names) as caught:
        run.approve(edited=edit)
    assert "\n" not in str(caught.value)
    assert outbox.sent == {} and run.waiting == request and run.step_no == steps
    assert run.state is RunState.WAITING_FOR_HUMAN and run.pending is not None and run.pending.raw == PUSH


def test_an_edit_of_a_gated_file_call_is_type_checked(tmp_path: Path) -> None:
    run = _run(tmp_path / "ws", [WRITE, DELETE, READ], Outbox())
    run.run()
    assert run.waiting is not None
    with pytest.raises(RunStateError, match="argument path"):
        run.approve(edited={"path": ""})
    assert (tmp_path / "ws" / "report.md").exists()
    (tmp_path / "ws" / "keep.md").write_text("x", encoding="utf-8")
    run.approve(edited={"path": "keep.md"})
    assert (tmp_path / "ws" / "report.md").exists() and not (tmp_path / "ws" / "keep.md").exists()


class _Recording:
    """An outside world that keeps every call it applies (a key seen twice would be a double effect)."""

    def __init__(self) -> None:
        self.applied: list[tuple[str, dict[str, Any]]] = []

    def apply(self, action: GatedAction, idempotency_key: str) -> ToolResult:
        self.applied.append((idempotency_key, dict(action.args)))
        return ToolResult.success(action.kind, f"{action.kind} applied", key=idempotency_key)


def test_an_edited_approval_of_a_run_parked_and_resumed_elsewhere_applies_the_edit_once(tmp_path: Path) -> None:
    db, outbox = tmp_path / "runs.sqlite", _Recording()
    store = SQLiteStore(db)
    run = _run(tmp_path / "ws", [READ, PUSH, READ], outbox, store)
    run.run()
    assert run.state is RunState.WAITING_FOR_HUMAN
    store.close()  # the process that parked it is gone; another resumes it

    store = SQLiteStore(db)
    resumed = Run.resume(store, "R1", proposer=ScriptedProposer([READ, PUSH, READ]), effects=outbox,
                         approver=AskHuman())
    assert resumed.state is RunState.WAITING_FOR_HUMAN
    record = resumed.approve(edited={"message": "edited"})
    assert [args for _, args in outbox.applied] == [{"branch": "main", "message": "edited"}]
    (key, _), edited = outbox.applied[0], parse_proposal({**PUSH, "message": "edited"})
    assert key.endswith(edited.args_sha256[:16]), "the effect's key covers the edited arguments"
    (row,) = store.steps("R1", record.step, record.step)
    stored = load_step_row(row.record)
    (decided,) = [e for e in stored.events if e.kind == "human_decided"]
    assert decided.edited and decided.edited_args_sha256 == edited.args_sha256
    assert stored.proposal is not None and stored.proposal.args_sha256 == edited.args_sha256
    store.close()


def test_a_crash_after_an_edited_effect_never_applies_it_again(tmp_path: Path) -> None:
    db, outbox = tmp_path / "runs.sqlite", CountingOutbox()
    store = SQLiteStore(db)
    run = _run(tmp_path / "ws", [READ, PUSH, READ], outbox, store)
    run.run()
    run.inject(ProcessCrash(point=CrashPoint.AFTER_EFFECT))
    with pytest.raises(SimulatedCrash):
        run.approve(edited={"message": "edited"})
    assert len(outbox.applied) == 1, "the edited push ran before the crash"
    store.close()

    store = SQLiteStore(db)
    resumed = Run.resume(store, "R1", proposer=ScriptedProposer([READ, PUSH, READ]), effects=outbox,
                         approver=AskHuman())
    edited_key = outbox.applied[0]
    assert resumed.state is RunState.BLOCKED and resumed.stop_reason is not None
    assert resumed.stop_reason.code == "effect_uncertain" and edited_key in resumed.stop_reason.message
    assert len(outbox.applied) == 1
    store.close()


def test_a_replay_executes_the_edited_call_the_saved_run_executed(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.sqlite")
    with _run(tmp_path / "ws", [READ, PUSH, READ], Outbox(), store) as run:
        run.run()
        executed = run.approve(edited={"message": "edited"}).proposal
        run.run(max_steps=1)
    assert executed is not None
    result = replay_run(store, "R1", workspace=tmp_path / "replay")
    with result.run:
        assert result.identical, result.detail
        replayed = result.run.records[2].proposal
        assert replayed is not None and replayed.args_sha256 == executed.args_sha256, "the edit, not the request"
    store.close()
