"""Fork from a checkpoint or a snapshot into a new run id, leaving the original untouched; replay."""

from __future__ import annotations

from pathlib import Path

import pytest
from persisthelpers import CountingOutbox, outcome, push_run

from harness_lab import RunState
from harness_lab.errors import RunStateError
from harness_lab.proposers.replay import replay_run
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
