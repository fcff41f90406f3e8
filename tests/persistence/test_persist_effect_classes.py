"""One effect classification: the run holds actions, the ledger and tool results carry names."""

from __future__ import annotations

from harness_lab.records.actions import EXTERNAL_KINDS, TOOL_KINDS
from harness_lab.records.effect_classes import effect_class, effect_of_tool
from harness_lab.records.proposal import parse_proposal

_EXPECTED = {"write_file": "redoable", "write_report": "redoable", "delete_file": "workspace",
             "run_command": "workspace", "read_file": "read", "read_evidence": "read", "think": "read",
             "list_dir": "read", "read_ref": "read", "finish": "read",
             # the context's own actions change only the context, which a checkpoint restores
             "begin_subtask": "read", "finish_subtask": "read", "search_history": "read", **dict.fromkeys(EXTERNAL_KINDS, "external")}
# Enough arguments for every kind (what a kind does not take is kept as a claim).
_ARGS = {"path": "a", "content": "x", "text": "x", "argv": ["ls"], "id": "e", "thought": "t", "ref": "r",
         "name": "s", "goal": "g", "query": "q"}


def test_every_kind_is_classified_the_same_by_type_and_by_name() -> None:
    assert set(_EXPECTED) == TOOL_KINDS
    for kind, cls in _EXPECTED.items():
        action = parse_proposal({"kind": kind, **_ARGS}).action
        assert action is not None, kind
        assert effect_class(action) == effect_of_tool(kind) == cls, kind


def test_a_name_the_harness_does_not_know_is_external() -> None:
    assert effect_of_tool("some_new_tool") == "external"  # its outcome cannot be checked: never retried
