"""A store on a read-only location (a shared runs.sqlite, a read-only mount) can be traced and replayed:
``SQLiteStore(path, read_only=True)`` opens it read-only (``immutable`` when its folder is not writable and
no write-ahead log is there), and a write is refused with one line. Tests run as root, who ignores file
modes: a read-only bind mount in a private mount namespace (``unshare -m``) makes the location read-only."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness_lab.cli import main
from harness_lab.errors import StoreError
from harness_lab.store import SQLiteStore

ROOT = Path(__file__).resolve().parents[2]


def _stored_run(folder: Path) -> Path:
    db = folder / "runs.sqlite"
    made = subprocess.run([sys.executable, "-m", "harness_lab.cli", "run", "conforming_report", "--db", str(db),
                           "--run-id", "R1"], capture_output=True, text=True, env=_env(), timeout=120)
    assert made.returncode == 0, made.stderr
    SQLiteStore(db).close()  # the last connection to close copies the log in and removes it, as a shared copy has it
    return db


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def _in_read_only_mount(folder: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """``harness-lab argv`` with ``folder`` bound read-only over itself, in a mount namespace of its own."""
    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("mount") is None:
        pytest.skip("needs root and unshare(1) to make a read-only bind mount")
    probe = subprocess.run(["unshare", "-m", "sh", "-c", f"mount --bind -o ro '{folder}' '{folder}'"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"mounts are not permitted here: {probe.stderr.strip()}")
    cli = " ".join(f"'{a}'" for a in (sys.executable, "-m", "harness_lab.cli", *argv))
    return subprocess.run(["unshare", "-m", "sh", "-c", f"mount --bind -o ro '{folder}' '{folder}' && {cli}"],
                          capture_output=True, text=True, env=_env(), timeout=120)


def test_trace_and_replay_read_a_store_on_a_read_only_mount(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "shared"
    folder.mkdir()
    db = _stored_run(folder)
    before = sorted(p.name for p in folder.iterdir())
    assert before == ["runs.sqlite"], "the writer exited: no log beside the file"
    traced = _in_read_only_mount(folder, "trace", "--db", str(db), "--run-id", "R1")
    assert traced.returncode == 0, traced.stderr
    replayed = _in_read_only_mount(folder, "replay", "--db", str(db), "--run-id", "R1")
    assert replayed.returncode == 0 and replayed.stdout.startswith("identical"), replayed.stderr
    assert sorted(p.name for p in folder.iterdir()) == before
    assert main(["trace", "--db", str(db), "--run-id", "R1"]) == 0
    assert traced.stdout == capsys.readouterr().out and traced.stdout.count("\n") == 4

    # A writer has the store open: its last step is in the write-ahead log beside the file, which the
    # reader must read (an immutable open would miss it).
    writer = SQLiteStore(db)
    spec = writer.run_info("R1").spec
    writer.commit_step("R2", 0, 0.0, "null", writer.last_step("R1").checkpoint, None, register=spec)  # type: ignore[union-attr]
    assert (folder / "runs.sqlite-wal").exists()
    try:
        traced = _in_read_only_mount(folder, "trace", "--db", str(db), "--run-id", "R2")
        assert traced.returncode == 0 and traced.stdout == "", traced.stderr  # R2 is found: a row, no record
        missing = _in_read_only_mount(folder, "trace", "--db", str(db), "--run-id", "R3")
        assert missing.returncode == 2 and "'R3'" in missing.stderr and "R2" in missing.stderr
    finally:
        writer.close()


def test_a_read_only_store_reads_and_refuses_writes_with_one_line(tmp_path: Path) -> None:
    db = _stored_run(tmp_path)
    store = SQLiteStore(db, read_only=True)
    assert store.read_only and store.run_ids() == ["R1"] and store.last_step("R1") is not None
    with pytest.raises(StoreError, match=r"opened read-only") as refused:
        store.set_status("R1", "stopped", "test")
    assert "\n" not in str(refused.value)
    with pytest.raises(StoreError, match=r"opened read-only"):
        store.commit_step("R1", 99, 0.0, "null", "{}", None)
    store.close()
    writer = SQLiteStore(db)
    assert writer.run_info("R1").status == "active" and writer.last_step("R1").step < 99, "nothing was written"  # type: ignore[union-attr]
    writer.close()
    with pytest.raises(StoreError, match="no such checkpoint database"):
        SQLiteStore(tmp_path / "missing.sqlite", read_only=True)  # never a new, empty file
    assert not (tmp_path / "missing.sqlite").exists()
