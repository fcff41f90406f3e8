"""Refused resumes and forks: one line naming the run, step or value; nothing made on disk or in the store."""

from __future__ import annotations

import shutil
from pathlib import Path

from persisthelpers import CountingOutbox, push_run

from harness_lab import Run, RunState
from harness_lab.store import SQLiteStore


def test_resume_with_the_workspace_deleted_says_so_and_does_not_recreate_it(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.sqlite")
    ws = tmp_path / "gone" / "ws"
    run = push_run(ws, store, CountingOutbox())
    run.run(max_steps=3)
    run.close()
    shutil.rmtree(tmp_path / "gone")
    rows = [s.checkpoint for s in store.steps("R1", start=0)]
    resumed = Run.resume(store, "R1", effects=CountingOutbox())
    assert resumed.state is RunState.BLOCKED and resumed.resume_report is not None
    workspace = next(c for c in resumed.resume_report.checks if c.name == "workspace")
    assert not workspace.ok and workspace.detail == f"{ws} is missing"
    assert not (tmp_path / "gone").exists()  # the refused resume made no directory
    assert [s.checkpoint for s in store.steps("R1", start=0)] == rows
    resumed.close()
