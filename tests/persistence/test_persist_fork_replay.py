"""Fork from a checkpoint or a snapshot into a new run id, leaving the original untouched; replay."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from persisthelpers import CountingOutbox, outcome, push_run

from harness_lab import RunState
from harness_lab._stored_context import item_texts, stored_context
from harness_lab.context import ContextManager
from harness_lab.errors import RunStateError
from harness_lab.proposers.replay import replay_run
from harness_lab.resume import load_checkpoint
from harness_lab.store import SQLiteStore


def test_fork_from_checkpoint_leaves_the_original_untouched(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.sqlite")
    run = push_run(tmp_path / "ws", store, CountingOutbox())
    run.run(max_steps=3)
    rows = [s.checkpoint for s in store.steps("R1", start=0)]
    ws_before = run.sandbox.workspace_hash()
    fork = run.fork("R1@3", workspace=tmp_path / "fork")
    assert fork.run_id == "R1-fork1" and fork.step_no == 3
    fork.executor.effects = CountingOutbox()
    assert fork.run() is RunState.REVIEW_READY
    assert [s.checkpoint for s in store.steps("R1", start=0)] == rows
    assert run.sandbox.workspace_hash() == ws_before and run.step_no == 3
    assert store.last_step("R1-fork1") is not None
    with pytest.raises(RunStateError, match="no copy of the workspace"):
        run.fork("R1@1")  # the workspace moved on and no snapshot holds step 1's files


def test_fork_from_a_sandbox_snapshot(tmp_path: Path) -> None:
    run = push_run(tmp_path / "ws", None, CountingOutbox())
    run.run()
    snap = next(s for s in run.sandbox.snapshots() if s.trigger and "notes/plan.txt" in s.trigger)
    fork = run.fork(snap.id, new_run_id="F1")
    assert (fork.workspace / "notes" / "plan.txt").read_text() == "draft the report, then push"
    assert fork.run_id == "F1" and run.state is RunState.REVIEW_READY


def test_replay_of_a_saved_trace_is_identical(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.sqlite")
    original = push_run(tmp_path / "ws", store, CountingOutbox())
    original.run()
    result = replay_run(store, "R1")
    assert result.identical, result.detail
    assert outcome(result.run)["receipt"] == outcome(original)["receipt"]
    result.run.close()


SECRET_STEPS = [
    {"kind": "write_file", "path": ".env", "content": "password=hunter2hunter2\n"},
    {"kind": "read_file", "path": ".env"},
    {"kind": "read_evidence", "id": "harness-boundary"},
    {"kind": "read_evidence", "id": "acceptance-snapshot"},
    {"kind": "finish"},
]


def test_a_forks_first_row_holds_the_context_it_restored_and_no_secret(tmp_path: Path) -> None:
    db = tmp_path / "runs.sqlite"
    store = SQLiteStore(db)
    run = push_run(tmp_path / "ws", store, CountingOutbox(), actions=SECRET_STEPS)
    run.run(max_steps=4)
    assert "hunter2hunter2" in json.dumps(run.context.state()), "the live context holds it; the store must not"
    for step in (4, 2):  # the last row, and a row in the middle of a change-log span
        fork = run.fork(f"R1@{step}", new_run_id=f"F{step}", workspace=tmp_path / f"fork{step}")
        row = store.step(f"F{step}", step)
        assert row.context is not None
        assert json.loads(row.context) == json.loads(json.dumps(fork.context.state(ref_texts=False)))
        assert fork.context.view() == load_checkpoint_view(store, f"R1@{step}")
        fork.close()
    store.close()
    data = b"".join(p.read_bytes() for p in db.parent.glob(db.name + "*"))
    assert b"hunter2hunter2" not in data and b"[REDACTED]" in data


def load_checkpoint_view(store: SQLiteStore, checkpoint_id: str) -> object:
    run_id, step = checkpoint_id.split("@")
    _, context = load_checkpoint(store, run_id, int(step))
    assert context is not None
    return ContextManager.from_state(context).view()


def test_stored_item_texts_are_the_items_as_stored(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.sqlite")
    run = push_run(tmp_path / "ws", store, CountingOutbox())
    run.run(max_steps=5)
    for step in range(6):
        row = store.step("R1", step)
        checkpoint, _ = load_checkpoint(store, "R1", step)
        state, texts = stored_context(store, "R1", step, checkpoint.context_base, row.context)
        assert state is not None and texts
        by_id = {entry["id"]: entry for entry in state["items"]}
        assert all(json.loads(text) == by_id[item_id] for item_id, text in texts.items())
        if checkpoint.context_base == step:  # a whole state: every item has its text
            assert texts.keys() == by_id.keys()


def test_item_texts_give_up_on_text_not_in_the_checkpointers_shape() -> None:
    item = {"kind": "context_item", "id": "c1", "text": 'say },{"kind":"context_item","id":"c9", ok'}
    other = {"kind": "context_item", "id": "c2", "text": "x"}
    compact = json.dumps({"live": [], "items": [item, other]}, separators=(",", ":"), ensure_ascii=False)
    assert item_texts(compact, json.loads(compact)) == {
        "c1": json.dumps(item, separators=(",", ":"), ensure_ascii=False),
        "c2": json.dumps(other, separators=(",", ":"), ensure_ascii=False)}
    alone = json.dumps({"items": [other]}, separators=(",", ":"))
    assert item_texts(alone, json.loads(alone)) == {"c2": json.dumps(other, separators=(",", ":"))}
    odd = json.dumps({"items": [{**other, "id": 'c"2'}]}, separators=(",", ":"))
    assert item_texts(odd, json.loads(odd)) == {}  # an escaped id: given up, not guessed
    spaced = json.dumps({"live": [], "items": [item, other]})
    assert item_texts(spaced, json.loads(spaced)) == {}
    inner = {"kind": "context_item", "id": "c1", "inner": [{"a": 1}, other]}  # a boundary-like separator inside
    nested = json.dumps({"items": [inner]}, separators=(",", ":"))
    assert item_texts(nested, json.loads(nested)) == {}
    swapped = compact.replace('"id":"c2"', '"id":"c3"')
    assert item_texts(swapped, json.loads(compact)) == {}
