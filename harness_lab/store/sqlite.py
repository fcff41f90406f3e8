"""The default store: one embedded SQLite file, no server.

Settings, on purpose:

* ``journal_mode=WAL``: a commit appends to the write-ahead log instead of rewriting pages, so a
  step costs one small sequential write; readers (``harness-lab trace``, a watchdog) never block
  the writer; and a process killed mid-transaction leaves the database intact (the torn tail of
  the log is ignored on the next open).
* ``synchronous=NORMAL`` (default): in WAL mode a commit is durable against a killed *process*
  (SIGKILL, OOM, crash) as soon as ``COMMIT`` returns, because the log lives in the OS page cache;
  only a power cut or kernel crash can lose the last few commits (never corrupt the file). That
  is the failure this store is built and tested for, at ~10x less cost per step than ``FULL``,
  which fsyncs the log on every commit. Pass ``synchronous="FULL"`` to survive power cuts too.
* ``busy_timeout``: a second process (a watchdog, ``trace``) waits for the lock instead of failing.

Each step is one transaction (the step row, the blobs it made, its ledger updates; a lone statement
runs in autocommit mode, which is one transaction without the BEGIN/COMMIT round trips); statements are
fixed SQL texts, so the ``sqlite3`` statement cache prepares each once per connection. Schema 2 added
the ``blobs`` table; a schema-1 file gains it on open (nothing existing is rewritten).
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from ..errors import StoreError
from .base import (
    SCHEMA_VERSION,
    EffectEntry,
    EffectStatus,
    Heartbeat,
    HistoryEntry,
    RunInfo,
    StoredStep,
    _unknown_run,
)

__all__ = ["SQLiteStore"]

_APP = "harness-lab"
_BLOBS = "CREATE TABLE blobs (sha256 TEXT PRIMARY KEY, text TEXT NOT NULL) WITHOUT ROWID"
_TABLES = (
    "CREATE TABLE schema_version (app TEXT NOT NULL, version INTEGER NOT NULL)",
    # ``run_no``: the run's number in step keys (AUTOINCREMENT: never reused, and VACUUM keeps it).
    "CREATE TABLE runs (run_no INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL UNIQUE, spec TEXT NOT NULL,"
    " created_at REAL NOT NULL, status TEXT NOT NULL DEFAULT 'active', status_reason TEXT NOT NULL DEFAULT '')",
    # Keyed by one integer, ``run_no << 32 | step`` (the rowid itself): a step's INSERT changes one
    # b-tree, where a (run_id, step) key is a second one (an index page more through the write-ahead
    # log per step: ~41 -> ~33 µs per INSERT of a 2.8 KB row). A rowid table keeps a row of up to
    # ~4 KB in its leaf page (a WITHOUT ROWID table spills rows over ~1 KB to overflow pages).
    # Files made before keep their (run_id, step) table; every statement reads both the same.
    "CREATE TABLE steps (id INTEGER PRIMARY KEY, run_id TEXT NOT NULL, step INTEGER NOT NULL, at REAL NOT NULL,"
    " record TEXT NOT NULL, checkpoint TEXT NOT NULL, context TEXT)",
    "CREATE TABLE effects (key TEXT PRIMARY KEY, run_id TEXT NOT NULL, step INTEGER NOT NULL,"
    " tool TEXT NOT NULL, status TEXT NOT NULL, detail TEXT NOT NULL)",
    "CREATE INDEX effects_by_step ON effects (run_id, step, status)",
    "CREATE TABLE heartbeats (run_id TEXT PRIMARY KEY, at REAL NOT NULL, step INTEGER NOT NULL,"
    " progress_at REAL NOT NULL, pid INTEGER NOT NULL, doing TEXT NOT NULL)",
    "CREATE TABLE reports (run_id TEXT NOT NULL, at REAL NOT NULL, text TEXT NOT NULL)",
    _BLOBS,
)
_INSERT_BLOB = "INSERT OR IGNORE INTO blobs (sha256, text) VALUES (?, ?)"
_INSERT_INTENT = "INSERT OR IGNORE INTO effects (key, run_id, step, tool, status, detail) VALUES (?, ?, ?, ?, ?, ?)"
_INSERT_STEP = "INSERT INTO steps (run_id, step, at, record, checkpoint, context) VALUES (?, ?, ?, ?, ?, ?)"
_INSERT_KEYED = "INSERT INTO steps (id, run_id, step, at, record, checkpoint, context) VALUES (?, ?, ?, ?, ?, ?, ?)"
_STEP_BITS = 32  # a step key is run_no << 32 | step
_LAST = 2**62  # "to the last step" (a range end)
_COMMIT_EFFECTS = "UPDATE effects SET status = 'committed' WHERE run_id = ? AND step = ? AND status IN ('intent', 'resolved')"
_STEP_COLS = "run_id, step, at, record, checkpoint, context"


class SQLiteStore:
    """Checkpoints in one SQLite file (see the module docstring for the settings and why).

    ``create=False`` opens an existing store only (``resume``, ``trace``): a missing file is an
    error, never a new empty database. A file that is not SQLite, a SQLite file of another
    application, a corrupt one, or one written by a newer schema raises :class:`StoreError` and
    is left exactly as it was.
    """

    def __init__(self, path: str | os.PathLike[str], *, create: bool = True,
                 synchronous: Literal["NORMAL", "FULL"] = "NORMAL") -> None:
        self.path = Path(path)
        if synchronous not in ("NORMAL", "FULL"):
            raise ValueError("synchronous must be 'NORMAL' or 'FULL'")
        if not self.path.exists():
            if not create:
                raise StoreError(f"{self.path}: no such checkpoint database")
            if not self.path.parent.is_dir():
                raise StoreError(f"{self.path}: directory {self.path.parent} does not exist")
        elif not self.path.is_file():
            raise StoreError(f"{self.path}: not a regular file")
        self._lock = threading.Lock()  # the heartbeat thread shares the connection
        try:
            self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=10.0)
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: cannot open: {exc}") from exc
        self._run_nos: dict[str, int] = {}  # run_id -> run_no, for step keys (a run's number never changes)
        try:
            self._check_or_create()
            self._keyed = "id" in {r[1] for r in self._db.execute("PRAGMA table_info(steps)")}
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(f"PRAGMA synchronous={synchronous}")
        except sqlite3.DatabaseError as exc:
            self._db.close()
            raise StoreError(f"{self.path}: not a usable harness-lab checkpoint database ({exc})") from exc
        except StoreError:
            self._db.close()
            raise

    # -- opening --------------------------------------------------------------------------------
    def _check_or_create(self) -> None:
        db = self._db
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not tables:
            db.execute("BEGIN IMMEDIATE")
            try:
                for sql in _TABLES:
                    db.execute(sql)
                db.execute("INSERT INTO schema_version (app, version) VALUES (?, ?)", (_APP, SCHEMA_VERSION))
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            return
        if "schema_version" not in tables:
            raise StoreError(f"{self.path}: a SQLite database of another application "
                             f"(tables: {', '.join(sorted(tables))}); refusing to touch it")
        row = db.execute("SELECT app, version FROM schema_version").fetchone()
        if row is None or row[0] != _APP:
            raise StoreError(f"{self.path}: schema_version names {row[0] if row else 'nothing'!r}, "
                             f"not {_APP!r}; refusing to touch it")
        if int(row[1]) > SCHEMA_VERSION:
            raise StoreError(f"{self.path}: written by a newer harness-lab (schema {row[1]} > {SCHEMA_VERSION}); "
                             "upgrade harness-lab to read it")
        if int(row[1]) == 1:  # schema 1 -> 2: only a new table; existing rows stay as they are
            self._tx([(_BLOBS, ()), ("UPDATE schema_version SET version = ?", (SCHEMA_VERSION,))])
        elif int(row[1]) in (2, 3, 4):  # -> 5: only newer rows' forms change; existing rows stay as they are
            self._tx([("UPDATE schema_version SET version = ?", (SCHEMA_VERSION,))])
        elif int(row[1]) < SCHEMA_VERSION:
            raise StoreError(f"{self.path}: schema {row[1]} is older than {SCHEMA_VERSION} and has no migration")
        check = db.execute("PRAGMA quick_check").fetchone()
        if check is None or check[0] != "ok":
            raise StoreError(f"{self.path}: database is corrupt (quick_check: {check[0] if check else '?'})")

    def _q(self, sql: str, args: tuple[Any, ...] = ()) -> list[Any]:
        with self._lock:
            try:
                return self._db.execute(sql, args).fetchall()
            except sqlite3.Error as exc:
                raise StoreError(f"{self.path}: {exc}") from exc

    def _tx(self, statements: list[tuple[str, tuple[Any, ...]]]) -> int:
        """Run the statements in one transaction; the rows the last one changed."""
        with self._lock:
            db = self._db
            changed = 0
            try:
                if len(statements) == 1:  # autocommit: one statement is one (durable) transaction
                    sql, args = statements[0]
                    return int(db.execute(sql, args).rowcount)
                db.execute("BEGIN IMMEDIATE")
                try:
                    for sql, args in statements:
                        changed = db.execute(sql, args).rowcount
                except BaseException:
                    db.execute("ROLLBACK")
                    raise
                db.execute("COMMIT")
            except sqlite3.IntegrityError as exc:
                raise StoreError(f"{self.path}: refused to overwrite ({exc})") from exc
            except sqlite3.Error as exc:
                raise StoreError(f"{self.path}: {exc}") from exc
            return changed

    # -- runs -----------------------------------------------------------------------------------
    def create_run(self, run_id: str, spec: dict[str, Any], at: float) -> None:
        if self.has_run(run_id):
            raise StoreError(f"{self.path}: run id {run_id!r} exists already; resume it or choose another id")
        self._tx([("INSERT INTO runs (run_id, spec, created_at) VALUES (?, ?, ?)",
                   (run_id, json.dumps(spec, separators=(",", ":")), at))])

    def has_run(self, run_id: str) -> bool:
        return bool(self._q("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)))

    def run_info(self, run_id: str) -> RunInfo:
        rows = self._q("SELECT spec, created_at, status, status_reason FROM runs WHERE run_id = ?", (run_id,))
        if not rows:
            raise StoreError(f"{self.path}: " + _unknown_run(run_id, self.run_ids()))
        spec, created, status, reason = rows[0]
        return RunInfo(run_id, json.loads(spec), float(created), status, reason)

    def run_ids(self) -> list[str]:
        return [r[0] for r in self._q("SELECT run_id FROM runs ORDER BY run_id")]

    # -- steps ----------------------------------------------------------------------------------
    def commit_step(self, run_id: str, step: int, at: float, record: str, checkpoint: str,
                    context: str | None, blobs: Sequence[tuple[str, str]] = (), *,
                    settle_effects: bool = True) -> None:
        insert: tuple[str, tuple[Any, ...]]
        if self._keyed:
            if not 0 <= step < 1 << _STEP_BITS:
                raise StoreError(f"{self.path}: step {step} is out of range (0 to {(1 << _STEP_BITS) - 1})")
            base = self._base(run_id)
            if base is None:
                raise StoreError(f"{self.path}: " + _unknown_run(run_id, self.run_ids()))
            insert = (_INSERT_KEYED, (base | step, run_id, step, at, record, checkpoint, context))
        else:
            insert = (_INSERT_STEP, (run_id, step, at, record, checkpoint, context))
        self._tx([*((_INSERT_BLOB, blob) for blob in blobs), insert,
                  *([(_COMMIT_EFFECTS, (run_id, step))] if settle_effects else [])])

    def _base(self, run_id: str) -> int | None:
        """``run_no << 32``: the first step key of the run (None: no such run)."""
        base = self._run_nos.get(run_id)
        if base is None:
            rows = self._q("SELECT run_no FROM runs WHERE run_id = ?", (run_id,))
            if not rows:
                return None
            base = self._run_nos[run_id] = int(rows[0][0]) << _STEP_BITS
        return base

    def _rows(self, columns: str, run_id: str, start: int, end: int, *, last: bool = False) -> list[Any]:
        """The run's step rows from ``start`` to ``end`` (both included), by step (``last``: the last one)."""
        order = "DESC LIMIT 1" if last else ""
        if not self._keyed:
            return self._q(f"SELECT {columns} FROM steps WHERE run_id = ? AND step >= ? AND step <= ? "
                           f"ORDER BY step {order}", (run_id, start, end))
        base = self._base(run_id)
        if base is None:
            return []
        low, high = max(start, 0), min(end, (1 << _STEP_BITS) - 1)
        return self._q(f"SELECT {columns} FROM steps WHERE id >= ? AND id <= ? ORDER BY id {order}",
                       (base | low, base | high)) if low <= high else []

    def blob(self, sha256: str) -> str | None:
        rows = self._q("SELECT text FROM blobs WHERE sha256 = ?", (sha256,))
        return str(rows[0][0]) if rows else None

    def contexts(self, run_id: str, start: int, end: int) -> list[tuple[int, str | None]]:
        rows = self._rows("step, context", run_id, start, end)
        if not rows:
            self.run_info(run_id)
        return [(int(n), c) for n, c in rows]

    def history(self, run_id: str) -> list[HistoryEntry]:
        self.run_info(run_id)
        return [HistoryEntry(run_id, n, at) for n, at in self._rows("step, at", run_id, 0, _LAST)]

    def last_step(self, run_id: str) -> StoredStep | None:
        rows = self._rows(_STEP_COLS, run_id, 0, _LAST, last=True)
        return StoredStep(*rows[0]) if rows else None

    def step(self, run_id: str, step: int) -> StoredStep:
        rows = self._rows(_STEP_COLS, run_id, step, step)
        if not rows:
            self.run_info(run_id)
            raise StoreError(f"{self.path}: run {run_id!r} has no step {step}")
        return StoredStep(*rows[0])

    def steps(self, run_id: str, start: int = 1, end: int | None = None) -> list[StoredStep]:
        self.run_info(run_id)
        return [StoredStep(*r) for r in self._rows(_STEP_COLS, run_id, start, end if end is not None else _LAST)]

    # -- the side-effect ledger -------------------------------------------------------------------
    def record_intent(self, entry: EffectEntry) -> EffectEntry | None:
        # One statement, no read first: an existing key is left as it is, and then read back.
        inserted = self._tx([(_INSERT_INTENT, (entry.key, entry.run_id, entry.step, entry.tool, entry.status,
                                               json.dumps(entry.detail, separators=(",", ":"))))])
        return None if inserted else self.effect(entry.key)

    def effect(self, key: str) -> EffectEntry | None:
        rows = self._q("SELECT key, run_id, step, tool, status, detail FROM effects WHERE key = ?", (key,))
        return _effect(rows[0]) if rows else None

    def effects(self, run_id: str, step: int | None = None) -> list[EffectEntry]:
        cols = "SELECT key, run_id, step, tool, status, detail FROM effects WHERE run_id = ?"
        rows = (self._q(f"{cols} ORDER BY step", (run_id,)) if step is None
                else self._q(f"{cols} AND step = ? ORDER BY rowid", (run_id, step)))  # effects_by_step index
        return [_effect(r) for r in rows]

    def set_effect_status(self, key: str, status: EffectStatus) -> None:
        if self.effect(key) is None:
            raise StoreError(f"{self.path}: no effect with idempotency key {key!r}")
        self._tx([("UPDATE effects SET status = ? WHERE key = ?", (status, key))])

    # -- liveness and reports ---------------------------------------------------------------------
    def beat(self, beat: Heartbeat) -> None:
        self._tx([("INSERT OR REPLACE INTO heartbeats (run_id, at, step, progress_at, pid, doing) "
                   "VALUES (?, ?, ?, ?, ?, ?)",
                   (beat.run_id, beat.at, beat.step, beat.progress_at, beat.pid, beat.doing))])

    def last_beat(self, run_id: str) -> Heartbeat | None:
        rows = self._q("SELECT run_id, at, step, progress_at, pid, doing FROM heartbeats WHERE run_id = ?", (run_id,))
        return Heartbeat(*rows[0]) if rows else None

    def set_status(self, run_id: str, status: str, reason: str) -> None:
        self.run_info(run_id)
        self._tx([("UPDATE runs SET status = ?, status_reason = ? WHERE run_id = ?", (status, reason, run_id))])

    def add_report(self, run_id: str, at: float, text: str) -> None:
        self.run_info(run_id)
        self._tx([("INSERT INTO reports (run_id, at, text) VALUES (?, ?, ?)", (run_id, at, text))])

    def reports(self, run_id: str) -> list[str]:
        self.run_info(run_id)
        return [r[0] for r in self._q("SELECT text FROM reports WHERE run_id = ? ORDER BY rowid", (run_id,))]

    def integrity_check(self) -> str:
        """``PRAGMA integrity_check``: ``"ok"`` or the problems SQLite found."""
        return "; ".join(str(r[0]) for r in self._q("PRAGMA integrity_check"))

    def close(self) -> None:
        with self._lock:
            self._db.close()


def _effect(row: tuple[Any, ...]) -> EffectEntry:
    key, run_id, step, tool, status, detail = row
    return EffectEntry(key, run_id, int(step), tool, status, json.loads(detail))
