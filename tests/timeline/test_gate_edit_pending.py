"""Structured edit_pending: arguments replaced by field, the tool kept; bad edits change nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness_lab import Run
from harness_lab.contract import load_contract
from harness_lab.errors import RunStateError
from harness_lab.evidence import EvidenceCatalogue
from harness_lab.loop.approval import AskHuman
from harness_lab.paths import data_dir
from harness_lab.proposers import ScriptedProposer
from harness_lab.store import SQLiteStore

WRITE = {"kind": "write_report", "text": "# Report\n\n## Conclusion\nold\n"}
RUN = {"kind": "run_command", "argv": ["ls"], "timeout": 5}
READ = {"kind": "read_evidence", "id": "harness-boundary"}
PUSH = {"kind": "push", "branch": "main", "message": "ship it"}


def _run(ws: Path, actions: list[dict[str, Any]]) -> Run:
    contract = load_contract(data_dir() / "contracts" / "report_task.yaml").with_budget(
        max_decisions=20, max_tool_calls=20, max_tokens=None, wall_clock_seconds=None)
    return Run(contract=contract, proposer=ScriptedProposer(actions), approver=AskHuman(),
               evidence=EvidenceCatalogue.from_dir(data_dir() / "evidence"), workspace=ws)


def test_a_field_given_as_text_replaces_that_argument_and_is_what_executes(tmp_path: Path) -> None:
    run = _run(tmp_path / "ws", [WRITE, READ])
    text = '# Report\n\n## Limitations\nA "quoted" line, and a \\ backslash.\n'
    edited = run.edit_pending(text=text)
    assert edited.action is not None and edited.action.kind == "write_report" and edited.raw == {**WRITE, "text": text}
    assert run.pending is edited
    record = run.step()
    assert record.proposal is edited
    assert (tmp_path / "ws" / "report.md").read_text(encoding="utf-8") == text, "the text as given, not JSON"
    (note,) = [e for e in record.events if e.kind == "note" and e.topic == "pending_edited"]
    assert note.data["before"] == WRITE and note.data["after"]["text"] == text


def test_args_mapping_keeps_the_other_arguments(tmp_path: Path) -> None:
    run = _run(tmp_path / "ws", [RUN, READ])
    edited = run.edit_pending(args={"argv": ["ls", "-a"]})
    assert edited.raw == {"kind": "run_command", "argv": ["ls", "-a"], "timeout": 5, "tool_type": "default"}
    edited = run.edit_pending(tool_type="shell")  # a field left at its default may be set
    assert edited.action is not None and edited.action.model_dump()["tool_type"] == "shell"


@pytest.mark.parametrize(("edit", "names"), [
    ({"content": "x"}, "unknown field 'content' for write_report"),
    ({"text": 3}, "argument text"),
    ({"kind": "think"}, "kind: the tool stays 'write_report'"),
    ({"args": {"text": 3}}, "argument text"),
])
def test_a_bad_edit_names_the_field_and_leaves_the_pending_call(tmp_path: Path, edit: dict[str, Any],
                                                                names: str) -> None:
    run = _run(tmp_path / "ws", [WRITE, READ])
    before = run.pending
    with pytest.raises(RunStateError, match=names) as caught:
        run.edit_pending(**edit)
    assert "\n" not in str(caught.value)
    assert run.pending is before and run.step_no == 0
    record = run.step()
    assert record.proposal is before and (tmp_path / "ws" / "report.md").read_text(encoding="utf-8") == WRITE["text"]
    assert not [e for e in record.events if e.kind == "note" and e.topic == "pending_edited"]


def test_whole_and_field_edits_are_one_or_the_other(tmp_path: Path) -> None:
    run = _run(tmp_path / "ws", [WRITE, READ])
    with pytest.raises(RunStateError, match="one of the two"):
        run.edit_pending(READ, text="x")
    with pytest.raises(RunStateError, match="one of the two"):
        run.edit_pending()
    assert run.edit_pending(READ).raw == READ, "a whole proposal still replaces it"


def test_a_bad_argument_proposal_is_fixed_by_field(tmp_path: Path) -> None:
    run = _run(tmp_path / "ws", [{"kind": "write_report", "text": 7}, READ])
    assert run.pending is not None and run.pending.action is None
    fixed = run.edit_pending(text="# Report\n")
    assert fixed.action is not None and fixed.raw == {"kind": "write_report", "text": "# Report\n"}


def test_at_a_human_gate_edit_pending_points_to_approve_edited(tmp_path: Path) -> None:
    run = _run(tmp_path / "ws", [PUSH, READ])
    run.step()
    with pytest.raises(RunStateError, match=r"approve\(edited=...\)"):
        run.edit_pending(message="x")
    assert run.pending is not None and run.pending.raw == PUSH


def test_a_run_opened_read_only_refuses_an_edit_and_says_so(tmp_path: Path) -> None:
    db = tmp_path / "runs.sqlite"
    store = SQLiteStore(db)
    with Run.from_scenario("missing_limitations", store=store, run_id="A") as run:
        run.run(max_steps=2)
    store.close()
    opened = Run.open(db, "A")
    with pytest.raises(RunStateError, match="opened read-only"):
        opened.edit_pending(text="x")
