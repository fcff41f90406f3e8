"""A run's own temporary folders do not outlive it: snapshots when the run is dropped without close(),
and a command-line run without a store takes its workspace with it (nothing could resume it)."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from harness_lab import Run
from harness_lab.cli import main


def test_a_dropped_run_leaves_no_snapshot_folder(own_tmp: Path, tmp_path: Path) -> None:
    run = Run.from_scenario("conforming_report", workspace=tmp_path / "ws")
    run.run()
    run.sandbox.snapshot(label="kept until the run goes")
    (snapshots,) = own_tmp.glob("harness-lab-snapshots-*")
    assert any(snapshots.iterdir()), "the snapshot was written there"
    del run
    gc.collect()  # the run holds cycles (its executor calls back into it): the collector frees it
    assert list(own_tmp.iterdir()) == []
    assert (tmp_path / "ws" / "report.md").is_file(), "a caller's workspace is never removed"


def test_a_command_line_run_without_a_store_removes_its_temporary_folders(
        own_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "conforming_report"]) == 0
    assert "final: REVIEW_READY" in capsys.readouterr().out
    assert list(own_tmp.iterdir()) == []


def test_a_command_line_run_with_a_store_keeps_its_workspace_for_resume(
        own_tmp: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "runs.sqlite"
    assert main(["run", "conforming_report", "--db", str(db), "--run-id", "R1"]) == 0
    gc.collect()
    (workspace,) = own_tmp.glob("harness-lab-ws-*")
    assert (workspace / "report.md").is_file()
    assert list(own_tmp.glob("harness-lab-snapshots-*")) == []
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("runs.sqlite")) == ["runs.sqlite"], \
        "the store was closed: its log was copied in and removed"
    capsys.readouterr()
    assert main(["resume", "--db", str(db), "--run-id", "R1"]) == 0
    assert "final: REVIEW_READY" in capsys.readouterr().out


def test_a_dropped_run_takes_its_own_temporary_workspace_unless_a_store_holds_it(
        own_tmp: Path, tmp_path: Path) -> None:
    from harness_lab.store import SQLiteStore

    run = Run.from_scenario("conforming_report")
    run.run()
    del run
    gc.collect()
    assert list(own_tmp.iterdir()) == [], "nothing could find that workspace any more"
    store = SQLiteStore(tmp_path / "runs.sqlite")
    stored = Run.from_scenario("conforming_report", store=store, run_id="R1")
    stored.run()
    del stored
    gc.collect()
    (workspace,) = own_tmp.glob("harness-lab-ws-*")
    assert (workspace / "report.md").is_file(), "a stored run resumes in its workspace"
    assert Run.resume(store, "R1").state.value == "REVIEW_READY"
    store.close()
