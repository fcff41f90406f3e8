"""A store refuses what it cannot use, with a clear error, and never overwrites anything."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest
from persisthelpers import CountingOutbox, push_run

from harness_lab import Run
from harness_lab.cli import main
from harness_lab.errors import StoreError
from harness_lab.store import SCHEMA_VERSION, InMemoryStore, SQLiteStore, Store


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_garbage_file_is_refused_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    path.write_bytes(b"this is not a database, it is a shopping list\n" * 20)
    before = _digest(path)
    with pytest.raises(StoreError, match="not a usable harness-lab checkpoint database"):
        SQLiteStore(path)
    assert _digest(path) == before


def test_foreign_sqlite_database_is_refused_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "other.sqlite"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE invoices (id INTEGER, amount REAL)")
    db.commit()
    db.close()
    before = _digest(path)
    with pytest.raises(StoreError, match="another application"):
        SQLiteStore(path)
    assert _digest(path) == before


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    SQLiteStore(path).close()
    db = sqlite3.connect(path)
    db.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION + 1,))
    db.commit()
    db.close()
    before = _digest(path)
    with pytest.raises(StoreError, match="newer harness-lab"):
        SQLiteStore(path)
    assert _digest(path) == before


def test_corrupt_pages_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    store = SQLiteStore(path)
    run = push_run(tmp_path / "ws", store, CountingOutbox())
    run.run()
    store.close()
    db = sqlite3.connect(path)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    data = bytearray(path.read_bytes())
    page = 4096
    assert len(data) >= 3 * page
    data[page: 3 * page] = b"\xa5" * (2 * page)  # scribble over two b-tree pages, headers included
    path.write_bytes(bytes(data))
    with pytest.raises(StoreError):
        s = SQLiteStore(path)
        Run.resume(s, "R1", effects=CountingOutbox())


def test_missing_file_is_not_created_for_reading(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no such checkpoint database"):
        SQLiteStore(tmp_path / "nope.sqlite", create=False)
    assert not (tmp_path / "nope.sqlite").exists()


@pytest.mark.parametrize("kind", ["sqlite", "memory"])
def test_unknown_run_and_duplicate_run_id(tmp_path: Path, kind: str) -> None:
    store: Store = SQLiteStore(tmp_path / "runs.sqlite") if kind == "sqlite" else InMemoryStore()
    with pytest.raises(StoreError, match="unknown run id 'R7'"):
        Run.resume(store, "R7")
    push_run(tmp_path / "ws", store, CountingOutbox()).run()
    steps = [s.checkpoint for s in store.steps("R1")]
    with pytest.raises(StoreError, match="exists already"):
        push_run(tmp_path / "ws2", store, CountingOutbox())
    with pytest.raises(StoreError):
        store.commit_step("R1", 1, 0.0, "{}", "{}", None)  # a committed step is never rewritten
    assert [s.checkpoint for s in store.steps("R1")] == steps


def test_cli_bad_database_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.sqlite"
    path.write_text("garbage")
    assert main(["trace", "--db", str(path), "--run-id", "R1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "bad.sqlite" in err
    assert main(["resume", "--db", str(tmp_path / "missing.sqlite"), "--run-id", "R1"]) == 2
    assert not (tmp_path / "missing.sqlite").exists()
