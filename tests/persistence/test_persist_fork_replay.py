"""Fork from a checkpoint or a snapshot into a new run id, leaving the original untouched; replay."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from persisthelpers import ACTIONS, CountingOutbox, outcome, push_run

from harness_lab import Run, RunState, ScriptedProposer
from harness_lab.context import ContextManager
from harness_lab.errors import RunStateError
from harness_lab.persistence._stored_context import item_texts, stored_context
from harness_lab.persistence.replay import replay_run
from harness_lab.persistence.resume import load_checkpoint
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
    # The workspace moved on and no snapshot holds step 1's files: the store's files of step 1 do (schema 7).
    early = run.fork("R1@1", workspace=tmp_path / "fork1")
    assert early.sandbox.manifest().keys() == run.at(1).files.keys()
    early.close()
    # A store written before schema 7 kept no files: then the refusal stands.
    with sqlite3.connect(tmp_path / "runs.sqlite") as db:
        db.execute("DELETE FROM manifests")
    with pytest.raises(RunStateError, match="no copy of the workspace"):
        run.fork("R1@1")


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


def test_replaying_a_fork_is_refused_in_one_line(tmp_path: Path) -> None:
    # It replayed the fork's own steps from step 1 in an empty workspace: "step 4: saved ... != replayed ...".
    store = SQLiteStore(tmp_path / "runs.sqlite")
    run = push_run(tmp_path / "ws", store, CountingOutbox())
    run.run(max_steps=3)
    fork = run.fork("R1@3", workspace=tmp_path / "fork")
    fork.executor.effects = CountingOutbox()
    fork.run()
    with pytest.raises(RunStateError, match=r"^run 'R1-fork1' starts at step 4 .* replay the run it was forked from$"):
        replay_run(store, "R1-fork1")


SECRET_STEPS = [
    {"kind": "write_file", "path": ".env", "content": "password=hunter2hunter2\n"},
    {"kind": "read_file", "path": ".env"},
    {"kind": "read_evidence", "id": "harness-boundary"},
    {"kind": "read_evidence", "id": "acceptance-snapshot"},
    {"kind": "finish"},
]


def test_a_forks_first_row_names_the_checkpoint_it_restored_and_no_secret(tmp_path: Path) -> None:
    db = tmp_path / "runs.sqlite"
    store = SQLiteStore(db)
    run = push_run(tmp_path / "ws", store, CountingOutbox(), actions=SECRET_STEPS)
    run.run(max_steps=4)
    assert "hunter2hunter2" in json.dumps(run.context.state()), "the live context holds it; the store must not"
    for step in (4, 2):  # the last row, and a row in the middle of a change-log span
        fork = run.fork(f"R1@{step}", new_run_id=f"F{step}", workspace=tmp_path / f"fork{step}")
        row = store.step(f"F{step}", step)
        checkpoint, context = load_checkpoint(store, f"F{step}", step)
        # the row stores no second copy of the context: it names the checkpoint it stands for
        assert row.context is None and checkpoint.context_from == f"R1@{step}" and checkpoint.context_base == step
        assert context is not None  # restored, it is the fork's context (a restore recounts the view's tokens)
        assert _plain(ContextManager.from_state(context).state(ref_texts=False)) == _plain(fork.context.state(ref_texts=False))
        assert fork.context.view() == load_checkpoint_view(store, f"R1@{step}")
        fork.close()
    store.close()
    data = b"".join(p.read_bytes() for p in db.parent.glob(db.name + "*"))
    assert b"hunter2hunter2" not in data and b"[REDACTED]" in data


def test_a_fork_steps_on_the_named_context_and_resumes_and_forks_again(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.sqlite")
    run = push_run(tmp_path / "ws", store, CountingOutbox())
    run.run(max_steps=3)
    fork = run.fork("R1@3", new_run_id="F1", workspace=tmp_path / "f1")
    fork.executor.effects = CountingOutbox()
    fork.run(max_steps=2)  # change logs on top of the named context
    for step in (4, 5):
        checkpoint, context = load_checkpoint(store, "F1", step)
        assert checkpoint.context_from == "R1@3" and checkpoint.context_base == 3
        assert context is not None and store.step("F1", step).context is not None
    expected = _plain(fork.context.state(ref_texts=False))
    stored = load_checkpoint(store, "F1", 5)[1]
    assert stored is not None and _plain(ContextManager.from_state(stored).state(ref_texts=False)) == expected
    second = fork.fork("F1@5", new_run_id="F2", workspace=tmp_path / "f2")  # a fork of a fork: two hops
    assert store.step("F2", 5).context is None and load_checkpoint(store, "F2", 5)[0].context_from == "F1@5"
    assert load_checkpoint(store, "F2", 5)[1] == stored and second.context.view() == fork.context.view()
    fork.close()
    resumed = Run.resume(store, "F1", proposer=ScriptedProposer(ACTIONS[5:]), effects=CountingOutbox())
    assert resumed.step_no == 5 and resumed.context.item(fork.context.view().items[-1].id).text == \
        fork.context.view().items[-1].text
    assert resumed.run() is RunState.REVIEW_READY
    for other in (run, second, resumed):
        other.close()


def _plain(state: object) -> object:
    return json.loads(json.dumps(state))


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
