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

Each step is one transaction (the step row, the blobs and files it made; the first row also registers the
run, so no kill leaves a run without one; a lone statement runs in autocommit mode, which is one transaction
without the BEGIN/COMMIT round trips: most steps are one INSERT). The row also settles its step's ledger
entries: an intent whose step has a row reads as committed (schema 9, ``_sqlite_reads``), so an effect step is
its intent's INSERT (durable before the effect) and its row's, not also an UPDATE in a BEGIN ... COMMIT. Statements are
fixed SQL texts, so the ``sqlite3`` statement cache prepares each once per connection. Schema 2 added
the ``blobs`` table; a schema-1 file gains it on open (nothing existing is rewritten). Schema 5 files
key step rows by one integer (see ``_sqlite_schema._TABLES``); older files keep their ``(run_id, step)`` key. Plain SQL
over a schema-5 file finds a step by ``id = (SELECT run_no FROM runs WHERE run_id = ?) * 4294967296 + step``
(~6 µs at 10,000 steps); a ``WHERE run_id = ? AND step = ?`` filter has no index and scans (~11 ms).

``read_only=True`` (``trace``, ``replay``) opens the file read-only (``mode=ro``) and writes nothing to
it: a store on a read-only mount or shared read-only can be read. A folder where the log's side files
cannot be made, with no log beside the file (its writer closed it), is opened ``immutable``: SQLite
then takes no locks and reads no log. In a writable folder SQLite makes the side files for the reader;
if none were there before, closing removes them again unless another connection uses the file
(``_sqlite_schema.tidy_side_files`` says how, and why not ``immutable``). A write raises :class:`StoreError`.

Where things live: this module opens the store and holds the write path (:meth:`SQLiteStore.commit_step`,
one transaction per step, and the other writes); the queries (history, trace reads, the ledger's
lookups) are in ``store/_sqlite_reads.py``, its base class; the tables, the checks and migrations on
open and the read-only URI in ``store/_sqlite_schema.py``; the log copier in ``store/_wal.py``.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import orjson

from ..errors import StoreError
from ._lease import Holder, take_new
from ._lease import release as release_leases
from ._lease import take as take_lease
from ._sqlite_reads import _BASE_COLS, _STEP_COLS, SQLiteReads
from ._sqlite_schema import SPAN as _SPAN
from ._sqlite_schema import check_or_create, connect, has_base, side_files, tidy_side_files
from ._wal import LogCopier
from .base import EffectEntry, EffectStatus, Heartbeat, StepFiles, _unknown_run

__all__ = ["SQLiteStore"]

_INSERT_BLOB = "INSERT OR IGNORE INTO blobs (sha256, text) VALUES (?, ?)"
_INSERT_FILE = "INSERT OR IGNORE INTO files (sha256, data) VALUES (?, ?)"
_INSERT_MANIFEST = "INSERT INTO manifests (run_id, step, base, text) VALUES (?, ?, ?, ?)"
_INSERT_INTENT = "INSERT OR IGNORE INTO effects (key, run_id, step, tool, status, detail) VALUES (?, ?, ?, ?, ?, ?)"
_INSERT_STEP = "INSERT INTO steps (run_id, step, at, record, checkpoint, context, base) VALUES (?, ?, ?, ?, ?, ?, ?)"
_INSERT_KEYED = ("INSERT INTO steps (id, run_id, step, at, record, checkpoint, context, base) "
                 "VALUES (?, ?, ?, ?, ?, ?, ?, ?)")
_INSERT_RUN = "INSERT INTO runs (run_id, spec, created_at) VALUES (?, ?, ?)"
# A registering first row: its key from the run number the INSERT just before it (same transaction) gave.
_INSERT_FIRST = ("INSERT INTO steps (id, run_id, step, at, record, checkpoint, context, base) VALUES "
                 "((SELECT run_no FROM runs WHERE run_id = ?) * 4294967296 + ?, ?, ?, ?, ?, ?, ?, ?)")


def _detail(detail: dict[str, Any]) -> str:
    """An intent's detail as compact JSON: orjson (~0.2 µs, against ~4 for json.dumps on an effect step's path),
    or the standard library's for what orjson refuses (a path holding a lone surrogate)."""
    try:
        return orjson.dumps(detail).decode()
    except TypeError:
        return json.dumps(detail, separators=(",", ":"))


class SQLiteStore(SQLiteReads):
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
        self._lock = threading.Lock()  # the heartbeat thread shares the connection
        # A reader leaves the folder as it found it: side files it made are tidied on close.
        self._tidy = read_only and not any(p.exists() for p in side_files(self.path))
        self._db = connect(self.path, create=create, read_only=read_only)
        self._cur = self._db.cursor()  # the step's INSERT, under the lock: no cursor made per step
        self._log: LogCopier | None = None
        self._me = Holder.me()
        self._leases: list[str] = []  # the runs this store object holds (given back on close)
        try:
            check_or_create(self._db, self.path, read_only=read_only, tx=self._tx, create=create)
            # A file of schema 5 or later keeps step rows under one integer key (see _sqlite_schema);
            # older files keep theirs, and every statement reads both the same.
            self._keyed = any(r[1] == "id" for r in self._db.execute("PRAGMA table_info(steps)"))
            self._run_nos = {}
            self._cols = _BASE_COLS if has_base(self._db) else _STEP_COLS
            if read_only:
                return
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(f"PRAGMA synchronous={synchronous}")
            # The log is copied back into the file off the step's path (see store/_wal.py).
            self._db.execute("PRAGMA wal_autocheckpoint=0")
            self._log = LogCopier(self, self.path, self._db)
        except sqlite3.DatabaseError as exc:
            self._close_db()
            raise StoreError(f"{self.path}: not a usable harness-lab checkpoint database ({exc})") from exc
        except StoreError:
            self._close_db()
            raise

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
                    return int(self._cur.execute(sql, args).rowcount)
                db.execute("BEGIN IMMEDIATE")
                try:
                    for sql, args in statements:
                        changed = db.execute(sql, args).rowcount
                except BaseException:
                    db.execute("ROLLBACK")
                    raise
                db.execute("COMMIT")
            except sqlite3.Error as exc:
                raise self._sqlite_error(exc) from exc
            return changed

    def _sqlite_error(self, exc: sqlite3.Error) -> StoreError:
        """The one-line error of a write SQLite refused (a constraint: an overwrite)."""
        return StoreError(f"{self.path}: refused to overwrite ({exc})" if isinstance(exc, sqlite3.IntegrityError)
                          else f"{self.path}: {exc}")

    # -- runs -----------------------------------------------------------------------------------
    def create_run(self, run_id: str, spec: dict[str, Any], at: float) -> None:
        if self.has_run(run_id):
            raise StoreError(f"{self.path}: run id {run_id!r} exists already; resume it or choose another id")
        self._tx([(_INSERT_RUN, (run_id, json.dumps(spec, separators=(",", ":")), at))])

    # -- the run lease (store/_lease.py) ----------------------------------------------------------------
    def take_lease(self, run_id: str) -> None:
        if self.read_only:
            raise StoreError(f"{self.path}: opened read-only (read_only=True); nothing is written to it")
        with self._lock:
            try:
                take_lease(self._db, run_id, self._me)
            except sqlite3.Error as exc:
                raise StoreError(f"{self.path}: {exc}") from exc
            if run_id not in self._leases:
                self._leases.append(run_id)

    def release_lease(self, run_id: str) -> None:
        with self._lock:
            if run_id in self._leases:
                self._leases.remove(run_id)
                release_leases(self._db, [run_id], self._me)

    # -- steps ----------------------------------------------------------------------------------
    def commit_step(self, run_id: str, step: int, at: float, record: str, checkpoint: str,
                    context: str | None, blobs: Sequence[tuple[str, str]] = (), *,
                    settle_effects: bool = True, register: dict[str, Any] | None = None,
                    files: StepFiles | None = None, base: int | None = None, lease: bool = False) -> None:
        # settle_effects is not needed here: the row itself settles its step's intents (see _sqlite_reads).
        log, run_no = self._log, self._run_nos.get(run_id)
        if log is not None and run_no is not None and register is None and not blobs and files is None:
            # Most steps: one INSERT, autocommitted (one durable transaction), under one lock with the log's count.
            if not 0 <= step < _SPAN:
                raise StoreError(f"{self.path}: step {step} is out of range")
            with self._lock:
                try:
                    self._cur.execute(_INSERT_KEYED, (run_no * _SPAN + step, run_id, step, at, record, checkpoint,
                                                      context, base))
                except sqlite3.Error as exc:
                    raise self._refused(exc, run_id, step) from exc
                log.committed()
            return
        statements: list[tuple[str, tuple[Any, ...]]] = [take_new(run_id, self._me)] if lease else []
        if register is not None:  # an id taken already fails the INSERT (UNIQUE): no read first (see _refused)
            statements.append((_INSERT_RUN, (run_id, json.dumps(register, separators=(",", ":")), at)))
        if self._keyed:
            if not 0 <= step < _SPAN:
                raise StoreError(f"{self.path}: step {step} is out of range")
            if register is not None:
                row: tuple[str, tuple[Any, ...]] = (_INSERT_FIRST, (run_id, step, run_id, step, at, record,
                                                                     checkpoint, context, base))
            elif (run_no := self._run_no(run_id)) is None:
                raise StoreError(f"{self.path}: " + _unknown_run(run_id, self.run_ids()))
            else:
                row = (_INSERT_KEYED, (run_no * _SPAN + step, run_id, step, at, record, checkpoint, context, base))
        else:
            row = (_INSERT_STEP, (run_id, step, at, record, checkpoint, context, base))
        statements += [*((_INSERT_BLOB, blob) for blob in blobs), row]
        if files is not None:  # only a step that changed the workspace (see StepFiles)
            statements += [*((_INSERT_FILE, item) for item in files.data),
                           (_INSERT_MANIFEST, (run_id, step, files.base, files.manifest))]
        try:
            self._tx(statements)
        except StoreError as exc:
            if lease and "UNIQUE constraint failed: leases." in str(exc.__cause__):  # held, or left: judged
                self.take_lease(run_id)
                return self.commit_step(run_id, step, at, record, checkpoint, context, blobs,
                                        settle_effects=settle_effects, register=register, files=files, base=base)
            if isinstance(exc.__cause__, sqlite3.Error):
                raise self._refused(exc.__cause__, run_id, step) from exc.__cause__
            raise
        with self._lock:
            if lease and run_id not in self._leases:
                self._leases.append(run_id)
            if self._log is not None:
                self._log.committed()

    def _refused(self, exc: sqlite3.Error, run_id: str, step: int) -> StoreError:
        """The one-line error of a step's write that SQLite refused."""
        cause = str(exc) if isinstance(exc, sqlite3.IntegrityError) else ""
        if "UNIQUE constraint failed: runs." in cause:  # registered meanwhile by another process
            return StoreError(f"{self.path}: run id {run_id!r} exists already; resume it or choose another id")
        if "UNIQUE constraint failed: steps." in cause:
            return StoreError(f"{self.path}: run {run_id!r} already has step {step}; refused to overwrite it")
        return self._sqlite_error(exc)

    # -- the side-effect ledger -------------------------------------------------------------------
    def record_intent(self, entry: EffectEntry) -> EffectEntry | None:
        # One statement, no read first: an existing key is left as it is, and then read back.
        inserted = self._tx([(_INSERT_INTENT, (entry.key, entry.run_id, entry.step, entry.tool, entry.status,
                                               _detail(entry.detail)))])
        return None if inserted else self.effect(entry.key)

    def set_effect_status(self, key: str, status: EffectStatus) -> None:
        if self.effect(key) is None:
            raise StoreError(f"{self.path}: no effect with idempotency key {key!r}")
        self._tx([("UPDATE effects SET status = ? WHERE key = ?", (status, key))])

    # -- liveness and reports ---------------------------------------------------------------------
    def beat(self, beat: Heartbeat) -> None:
        self._tx([("INSERT OR REPLACE INTO heartbeats (run_id, at, step, progress_at, pid, doing) "
                   "VALUES (?, ?, ?, ?, ?, ?)",
                   (beat.run_id, beat.at, beat.step, beat.progress_at, beat.pid, beat.doing))])

    def set_status(self, run_id: str, status: str, reason: str) -> None:
        self.run_info(run_id)
        self._tx([("UPDATE runs SET status = ?, status_reason = ? WHERE run_id = ?", (status, reason, run_id))])

    def add_report(self, run_id: str, at: float, text: str) -> None:
        self.run_info(run_id)
        self._tx([("INSERT INTO reports (run_id, at, text) VALUES (?, ?, ?)", (run_id, at, text))])

    def close(self) -> None:
        if self._log is not None:
            self._log.close()  # first: the last connection to close copies the log in and removes it
        with self._lock:
            if self._leases:
                try:
                    release_leases(self._db, self._leases, self._me)
                except sqlite3.Error:
                    pass  # a row left behind names this process, gone after exit: the next writer takes it over
                self._leases = []
            self._close_db()

    def _close_db(self) -> None:
        self._db.close()
        if self._tidy:
            tidy_side_files(self.path)

