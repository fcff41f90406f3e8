"""Tool calls a model plausibly makes, through the executor: a directory spelling ('notes/') of a
file is refused as open(2) refuses it, never a file named 'notes' or a delete of 'notes.md'; an
empty or blank file read back says so instead of blaming the path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loophelpers import make_run

from harness_lab.loop.approval import AutoApprove
from harness_lab.records.proposal import parse_proposal
from harness_lab.records.tools import ToolResult


def _results(tmp_path: Path, actions: list[dict[str, Any]]) -> list[ToolResult]:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.md").write_text("kept\n")
    (ws / "empty.md").write_text("")
    (ws / "blank.md").write_text(" \n\t\n")
    out = []
    with make_run(tmp_path, actions, approver=AutoApprove()) as run:
        for _ in actions:
            result = run.step().tool_result
            assert result is not None
            out.append(result)
    return out


def test_a_trailing_slash_names_a_directory_not_a_file(tmp_path: Path) -> None:
    write, delete, read = _results(tmp_path, [
        {"kind": "write_file", "path": "drafts/", "content": "x"},
        {"kind": "delete_file", "path": "notes.md/"},
        {"kind": "read_file", "path": "notes.md/"},
    ])
    ws = tmp_path / "ws"
    assert write.status == "error" and "'drafts/' ends with '/'" in (write.reason or "")
    assert not (ws / "drafts").exists()
    assert delete.status == "error" and "'notes.md' is a file, not a directory" in (delete.reason or "")
    assert (ws / "notes.md").read_text() == "kept\n"
    assert read.status == "error" and "not a directory" in (read.reason or "")


def test_an_empty_file_read_back_says_it_is_empty(tmp_path: Path) -> None:
    empty, blank = _results(tmp_path, [{"kind": "read_file", "path": "empty.md"},
                                       {"kind": "read_file", "path": "blank.md"}])
    assert empty.status == "error" and empty.reason == "'empty.md' is empty"
    assert blank.status == "error" and blank.reason == "'blank.md' holds only whitespace"
    assert "check the path" not in (empty.hint or "")  # the path was right


def test_true_or_false_is_not_a_number_and_an_empty_range_is_refused() -> None:
    timeout = parse_proposal({"kind": "run_command", "argv": ["sleep", "5"], "timeout": True})
    start = parse_proposal({"kind": "read_ref", "ref": "r1", "start": False})
    backwards = parse_proposal({"kind": "read_ref", "ref": "r1", "start": 5, "end": 2})
    for proposal, field in ((timeout, "timeout"), (start, "start"), (backwards, "end")):
        assert proposal.action is None and proposal.error is not None, proposal.action
        assert proposal.error.code == "bad_arguments" and f"argument {field}:" in proposal.error.message
    assert "end (2) must be after start (5)" in backwards.error.message  # type: ignore[union-attr]
    as_text = parse_proposal({"kind": "read_ref", "ref": "r1", "start": "3", "end": "9"})  # still accepted
    assert as_text.action is not None and as_text.action.model_dump()["start"] == 3
