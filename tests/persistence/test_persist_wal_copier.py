"""The store copies its write-ahead log back into the file off the step's path (store/_wal.py):
SQLite's automatic checkpoint is off on the writing connection, a thread of the store's own copies
the log, and the writer's own checkpoint every FINISH_EVERY commits keeps the log bounded."""

from __future__ import annotations

import gc
import os
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from harness_lab.store import SQLiteStore, _wal

ROW = "x" * 3000  # most of a page: every commit adds a page or two to the log


@pytest.fixture
def small_thresholds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_wal, "BACKGROUND_AT", 16)
    monkeypatch.setattr(_wal, "FINISH_EVERY", 64)


def _copiers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("harness-lab wal copier") and t.is_alive()]


def _wait_for(condition: object, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if callable(condition) and condition():
            return True
        time.sleep(0.01)
    return False


def _write(store: SQLiteStore, steps: range) -> None:
    for step in steps:
        store.commit_step("r", step, float(step), f'"{step}{ROW}"', "{}", None)


def test_sqlites_automatic_checkpoint_is_off_and_the_log_stays_bounded(
        tmp_path: Path, small_thresholds: None, monkeypatch: pytest.MonkeyPatch) -> None:
    # The writer's own checkpoints alone (a background copy in progress would only delay one a
    # few commits: how many depends on the disk, so it is kept out of this count).
    monkeypatch.setattr(_wal, "BACKGROUND_AT", 10**9)
    store = SQLiteStore(tmp_path / "s.sqlite")
    store.create_run("r", {"kind": "run_spec"}, 0.0)
    assert store._db.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
    _write(store, range(1, 641))
    # 640 commits of ~3 KB, ~3 log pages each: without the writer's own checkpoints the log would hold
    # all of them (~7.9 MB); it starts over after every 64 commits, and its file keeps the largest
    # size it reached (~0.8 MB).
    wal = os.path.getsize(tmp_path / "s.sqlite-wal")
    assert wal < 640 * 4096, wal
    rows = store.steps("r")
    assert [r.step for r in rows] == list(range(1, 641))
    assert rows[-1].record == f'"640{ROW}"'
    store.close()


def test_a_thread_of_the_store_copies_the_log_in_the_background(tmp_path: Path, small_thresholds: None) -> None:
    store = SQLiteStore(tmp_path / "s.sqlite")
    store.create_run("r", {"kind": "run_spec"}, 0.0)
    _write(store, range(1, 16))
    assert store._log.background_copies == 0  # started lazily: a short-lived store has no thread
    _write(store, range(16, 40))
    assert _wait_for(lambda: store._log.background_copies >= 1)
    # a second connection sees the rows the copy moved into the file
    other = sqlite3.connect(tmp_path / "s.sqlite")
    assert other.execute("SELECT count(*) FROM steps").fetchone()[0] == 39
    other.close()
    store.close()


def test_close_stops_the_thread_and_the_last_close_removes_the_log(tmp_path: Path, small_thresholds: None) -> None:
    before = set(_copiers())
    store = SQLiteStore(tmp_path / "s.sqlite")
    store.create_run("r", {"kind": "run_spec"}, 0.0)
    _write(store, range(1, 40))
    assert set(_copiers()) - before
    store.close()
    assert not set(_copiers()) - before
    assert not (tmp_path / "s.sqlite-wal").exists()
    reopened = SQLiteStore(tmp_path / "s.sqlite", create=False)
    assert len(reopened.steps("r")) == 39
    reopened.close()


def test_a_store_dropped_without_close_stops_its_thread(tmp_path: Path, small_thresholds: None) -> None:
    before = set(_copiers())
    store = SQLiteStore(tmp_path / "s.sqlite")
    store.create_run("r", {"kind": "run_spec"}, 0.0)
    _write(store, range(1, 40))
    started = set(_copiers()) - before
    assert started
    del store
    gc.collect()
    assert _wait_for(lambda: not any(t.is_alive() for t in started))


def test_the_thread_copies_the_log_once_a_cycle(tmp_path: Path, small_thresholds: None,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    # A copy costs its syncs more than its pages: one a cycle of FINISH_EVERY commits, at BACKGROUND_AT,
    # before the writer's own checkpoint (which needs the thread's copy to have ended).
    asked: list[int] = []
    request = _wal.LogCopier._request
    monkeypatch.setattr(_wal.LogCopier, "_request", lambda self: (asked.append(self._commits), request(self))[1])
    store = SQLiteStore(tmp_path / "s.sqlite")
    store.create_run("r", {"kind": "run_spec"}, 0.0)
    for cycle in range(3):  # each copy waited for, so that the writer's checkpoint finds the lock free
        _write(store, range(cycle * 64 + 1, cycle * 64 + 17))
        assert _wait_for(lambda n=cycle + 1: store._log.background_copies >= n)
        _write(store, range(cycle * 64 + 17, cycle * 64 + 65))
    assert asked == [16, 16, 16]  # commits since the log last started over, in each of three cycles
    store.close()
