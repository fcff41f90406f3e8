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
* the write-ahead log is copied back into the file by a thread of the store's own, not inside the
  ``COMMIT`` of whichever step crosses SQLite's automatic checkpoint (see ``store/_wal.py``).
* ``busy_timeout``: a second process (a watchdog, ``trace``) waits for the lock instead of failing.

Each step is one transaction (the step row, the blobs it made, its ledger updates; the first row also
registers the run, so no kill leaves a run without one; a lone statement runs in autocommit mode, which is one transaction without the BEGIN/COMMIT round trips); statements are
fixed SQL texts, so the ``sqlite3`` statement cache prepares each once per connection. Schema 2 added
the ``blobs`` table; a schema-1 file gains it on open (nothing existing is rewritten). Schema 5 files
key step rows by one integer (see ``_TABLES``); older files keep their ``(run_id, step)`` key. Plain SQL
over a schema-5 file finds a step by ``id = (SELECT run_no FROM runs WHERE run_id = ?) * 4294967296 + step``
(~6 µs at 10,000 steps); a ``WHERE run_id = ? AND step = ?`` filter has no index and scans (~11 ms).

``read_only=True`` (``trace``, ``replay``) opens the file read-only (``mode=ro``) and writes nothing, not
even the log's side files: a store on a read-only mount or shared read-only can be read. A folder where
the side files cannot be made, with no log beside the file (its writer closed it), is opened
``immutable``: SQLite then takes no locks and reads no log. A write raises :class:`StoreError`.
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
from ._wal import LogCopier
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
    # run_no: a run's number in this file, for the step rows' key (see steps).
    "CREATE TABLE runs (run_no INTEGER PRIMARY KEY, run_id TEXT NOT NULL UNIQUE, spec TEXT NOT NULL,"
    " created_at REAL NOT NULL, status TEXT NOT NULL DEFAULT 'active', status_reason TEXT NOT NULL DEFAULT '')",
    # Keyed by id = run_no * 2**32 + step, the rowid: one b-tree, so a step writes one leaf page (and
    # its parent when the leaf fills) through the write-ahead log, not also a (run_id, step) index's
    # page (~10 us of a no-op step). A rowid table keeps a row of up to ~4 KB in its leaf page.
    # Files made before keep their (run_id, step) key, WITHOUT ROWID or not (see _StepSql).
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
_INSERT_RUN = "INSERT INTO runs (run_id, spec, created_at) VALUES (?, ?, ?)"
# A registering first row: its key from the run number the INSERT just before it (same transaction) gave.
_INSERT_FIRST = ("INSERT INTO steps (id, run_id, step, at, record, checkpoint, context) VALUES "
                 "((SELECT run_no FROM runs WHERE run_id = ?) * 4294967296 + ?, ?, ?, ?, ?, ?, ?)")
_SPAN = 2**32  # steps per run in a keyed file
_COMMIT_EFFECTS = "UPDATE effects SET status = 'committed' WHERE run_id = ? AND step = ? AND status IN ('intent', 'resolved')"
_STEP_COLS = "run_id, step, at, record, checkpoint, context"


class SQLiteStore:
    """Checkpoints in one SQLite file (see the module docstring for the settings and why).

    ``create=False`` opens an existing store only (``resume``): a missing file is an error, never a
    new empty database; ``read_only=True`` too, and the store writes nothing (see the module docstring). A file that is not SQLite, a SQLite file of another
    application, a corrupt one, or one written by a newer schema raises :class:`StoreError` and
    is left exactly as it was.
    """

    def __init__(self, path: str | os.PathLike[str], *, create: bool = True, read_only: bool = False,
                 synchronous: Literal["NORMAL", "FULL"] = "NORMAL") -> None:
        self.path = Path(path)
        self.read_only = read_only
        if synchronous not in ("NORMAL", "FULL"):
            raise ValueError("synchronous must be 'NORMAL' or 'FULL'")
        if not self.path.exists():
            if not create or read_only:
                raise StoreError(f"{self.path}: no such checkpoint database")
            if not self.path.parent.is_dir():
                raise StoreError(f"{self.path}: directory {self.path.parent} does not exist")
        elif not self.path.is_file():
            raise StoreError(f"{self.path}: not a regular file")
        self._lock = threading.Lock()  # the heartbeat thread shares the connection
        try:
            self._db = sqlite3.connect(_read_only_uri(self.path) if read_only else self.path, isolation_level=None,
                                       check_same_thread=False, timeout=10.0, uri=read_only)
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: cannot open: {exc}") from exc
        self._log: LogCopier | None = None
        try:
            self._check_or_create()
            # A file of schema 5 or later keeps step rows under one integer key (see _TABLES); older
            # files keep theirs, and every statement below reads both the same.
            self._keyed = any(r[1] == "id" for r in self._db.execute("PRAGMA table_info(steps)"))
            self._run_nos: dict[str, int] = {}
            if read_only:
                return
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(f"PRAGMA synchronous={synchronous}")
            # The log is copied back into the file off the step's path (see store/_wal.py).
            self._db.execute("PRAGMA wal_autocheckpoint=0")
            self._log = LogCopier(self, self.path, self._db)
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
        if not tables and self.read_only:
            raise StoreError(f"{self.path}: an empty database, not a harness-lab checkpoint database")
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
        if self.read_only:
            pass  # read as it is: schemas 2-5 differ only in newer rows' forms; schema 1 has no blobs to read
        elif int(row[1]) == 1:  # schema 1 -> 2: only a new table; existing rows stay as they are
            self._tx([(_BLOBS, ()), ("UPDATE schema_version SET version = ?", (SCHEMA_VERSION,))])
        elif int(row[1]) in (2, 3, 4, 5):  # -> 4, 6: only newer rows' forms change; -> 5: only new files' layout
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
        if self.read_only:
            raise StoreError(f"{self.path}: opened read-only (read_only=True); nothing is written to it")
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
        self._tx([(_INSERT_RUN, (run_id, json.dumps(spec, separators=(",", ":")), at))])

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
                    settle_effects: bool = True, register: dict[str, Any] | None = None) -> None:
        statements: list[tuple[str, tuple[Any, ...]]] = []
        if register is not None:
            if self.has_run(run_id):
                raise StoreError(f"{self.path}: run id {run_id!r} exists already; resume it or choose another id")
            statements.append((_INSERT_RUN, (run_id, json.dumps(register, separators=(",", ":")), at)))
        if self._keyed:
            if not 0 <= step < _SPAN:
                raise StoreError(f"{self.path}: step {step} is out of range")
            if register is not None:
                row: tuple[str, tuple[Any, ...]] = (_INSERT_FIRST, (run_id, step, run_id, step, at, record,
                                                                     checkpoint, context))
            elif (run_no := self._run_no(run_id)) is None:
                raise StoreError(f"{self.path}: " + _unknown_run(run_id, self.run_ids()))
            else:
                row = (_INSERT_KEYED, (run_no * _SPAN + step, run_id, step, at, record, checkpoint, context))
        else:
            row = (_INSERT_STEP, (run_id, step, at, record, checkpoint, context))
        statements += [*((_INSERT_BLOB, blob) for blob in blobs), row]
        if settle_effects:
            statements.append((_COMMIT_EFFECTS, (run_id, step)))
        try:
            self._tx(statements)
        except StoreError as exc:
            cause = str(exc.__cause__) if isinstance(exc.__cause__, sqlite3.IntegrityError) else ""
            if "UNIQUE constraint failed: runs." in cause:  # registered meanwhile by another process
                raise StoreError(f"{self.path}: run id {run_id!r} exists already; resume it or choose another id"
                                 ) from exc.__cause__
            if "UNIQUE constraint failed: steps." in cause:
                raise StoreError(f"{self.path}: run {run_id!r} already has step {step}; refused to overwrite it"
                                 ) from exc.__cause__
            raise
        with self._lock:
            if self._log is not None:
                self._log.committed()

    def _run_no(self, run_id: str) -> int | None:
        run_no = self._run_nos.get(run_id)
        if run_no is None:
            rows = self._q("SELECT run_no FROM runs WHERE run_id = ?", (run_id,))
            if not rows:
                return None
            run_no = self._run_nos[run_id] = int(rows[0][0])
        return run_no

    def _range(self, cols: str, run_id: str, start: int, end: int, *, last: bool = False) -> list[Any]:
        """``cols`` of the run's rows ``start..end`` by step (only the last of them with ``last``)."""
        order = " DESC LIMIT 1" if last else ""
        if not self._keyed:
            return self._q(f"SELECT {cols} FROM steps WHERE run_id = ? AND step >= ? AND step <= ? ORDER BY step{order}",
                           (run_id, start, end))
        run_no, start, end = self._run_no(run_id), max(start, 0), min(end, _SPAN - 1)
        if run_no is None or start > end:
            return []
        return self._q(f"SELECT {cols} FROM steps WHERE id >= ? AND id <= ? ORDER BY id{order}",
                       (run_no * _SPAN + start, run_no * _SPAN + end))

    def blob(self, sha256: str) -> str | None:
        rows = self._q("SELECT text FROM blobs WHERE sha256 = ?", (sha256,))
        return str(rows[0][0]) if rows else None

    def contexts(self, run_id: str, start: int, end: int) -> list[tuple[int, str | None]]:
        rows = self._range("step, context", run_id, start, end)
        if not rows:
            self.run_info(run_id)
        return [(int(n), c) for n, c in rows]

    def history(self, run_id: str) -> list[HistoryEntry]:
        self.run_info(run_id)
        return [HistoryEntry(run_id, n, at) for n, at in self._range("step, at", run_id, -(2**62), 2**62)]

    def last_step(self, run_id: str) -> StoredStep | None:
        rows = self._range(_STEP_COLS, run_id, -(2**62), 2**62, last=True)
        return StoredStep(*rows[0]) if rows else None

    def step(self, run_id: str, step: int) -> StoredStep:
        rows = self._range(_STEP_COLS, run_id, step, step)
        if not rows:
            self.run_info(run_id)
            raise StoreError(f"{self.path}: run {run_id!r} has no step {step}")
        return StoredStep(*rows[0])

    def steps(self, run_id: str, start: int = 1, end: int | None = None) -> list[StoredStep]:
        self.run_info(run_id)
        return [StoredStep(*r) for r in self._range(_STEP_COLS, run_id, start, end if end is not None else 2**62)]

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
        if self._log is not None:
            self._log.close()  # first: the last connection to close copies the log in and removes it
        with self._lock:
            self._db.close()


def _read_only_uri(path: Path) -> str:
    """The URI that opens ``path`` read-only: ``immutable`` too when no log can be read or made beside it
    (a read-only folder and no ``-wal``: a reader would need to create ``-shm``, so SQLite refuses)."""
    uri = f"{path.resolve().as_uri()}?mode=ro"
    side = path.parent
    if not os.access(side, os.W_OK) and not path.with_name(path.name + "-wal").exists():
        uri += "&immutable=1"
    return uri


def _effect(row: tuple[Any, ...]) -> EffectEntry:
    key, run_id, step, tool, status, detail = row
    return EffectEntry(key, run_id, int(step), tool, status, json.loads(detail))
