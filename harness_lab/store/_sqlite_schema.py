"""Opening a :class:`~harness_lab.store.SQLiteStore` file: its tables, the checks and migrations on open,
and the URI that opens it read-only.

A new file gets ``_TABLES`` and ``schema_version``; an existing one must be a harness-lab store of
schema ``SCHEMA_VERSION`` or older (see :mod:`harness_lab.store.base` for what each version added), and
an older one is marked current on open (schema 1 also gains the ``blobs`` table; nothing existing is
rewritten). A file that is not one is refused and left exactly as it was.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import StoreError
from ._lease import LEASES
from .base import SCHEMA_VERSION

__all__ = ["SPAN", "check_or_create", "connect", "has_base", "read_only_uri", "side_files", "tidy_side_files"]

_APP = "harness-lab"
_BLOBS = "CREATE TABLE blobs (sha256 TEXT PRIMARY KEY, text TEXT NOT NULL) WITHOUT ROWID"
# Schema 7: the workspace's files beside the rows (see StepFiles in store/base.py).
_FILES = "CREATE TABLE IF NOT EXISTS files (sha256 TEXT PRIMARY KEY, data BLOB NOT NULL) WITHOUT ROWID"
_MANIFESTS = ("CREATE TABLE IF NOT EXISTS manifests (run_id TEXT NOT NULL, step INTEGER NOT NULL, base INTEGER NOT NULL,"
              " text TEXT NOT NULL, PRIMARY KEY (run_id, step)) WITHOUT ROWID")
_TABLES = (
    "CREATE TABLE schema_version (app TEXT NOT NULL, version INTEGER NOT NULL)",
    # run_no: a run's number in this file, for the step rows' key (see steps).
    "CREATE TABLE runs (run_no INTEGER PRIMARY KEY, run_id TEXT NOT NULL UNIQUE, spec TEXT NOT NULL,"
    " created_at REAL NOT NULL, status TEXT NOT NULL DEFAULT 'active', status_reason TEXT NOT NULL DEFAULT '')",
    # Keyed by id = run_no * 2**32 + step, the rowid: one b-tree, so a step writes one leaf page (and
    # its parent when the leaf fills) through the write-ahead log, not also a (run_id, step) index's
    # page (~10 us of a no-op step). A rowid table keeps a row of up to ~4 KB in its leaf page.
    # Files made before keep their (run_id, step) key, WITHOUT ROWID or not (see SQLiteReads._range).
    # base (schema 8): the step of the whole checkpoint a row's checkpoint delta folds onto (see store/fold.py).
    "CREATE TABLE steps (id INTEGER PRIMARY KEY, run_id TEXT NOT NULL, step INTEGER NOT NULL, at REAL NOT NULL,"
    " record TEXT NOT NULL, checkpoint TEXT NOT NULL, context TEXT, base INTEGER)",
    "CREATE TABLE effects (key TEXT PRIMARY KEY, run_id TEXT NOT NULL, step INTEGER NOT NULL,"
    " tool TEXT NOT NULL, status TEXT NOT NULL, detail TEXT NOT NULL)",
    "CREATE INDEX effects_by_step ON effects (run_id, step, status)",
    "CREATE TABLE heartbeats (run_id TEXT PRIMARY KEY, at REAL NOT NULL, step INTEGER NOT NULL,"
    " progress_at REAL NOT NULL, pid INTEGER NOT NULL, doing TEXT NOT NULL)",
    "CREATE TABLE reports (run_id TEXT NOT NULL, at REAL NOT NULL, text TEXT NOT NULL)",
    _BLOBS,
    LEASES,  # who writes which run (see store/_lease.py)
    _FILES,
    _MANIFESTS,
)
SPAN = 2**32  # steps per run in a keyed file (id = run_no * SPAN + step)

_Tx = Callable[[list[tuple[str, tuple[Any, ...]]]], int]


def connect(path: Path, *, create: bool, read_only: bool) -> sqlite3.Connection:
    """The connection a store uses (autocommit; shared with its heartbeat thread), after checking the
    path: with ``create=False`` or ``read_only`` a missing file is an error, never a new empty database.
    A new file is made here, mode 0600 (SQLite would make it 0644, readable by every command the harness
    runs), before SQLite opens it; its ``-wal`` and ``-shm`` take the file's mode."""
    if not path.exists():
        if not create or read_only:
            raise StoreError(f"{path}: no such checkpoint database")
        if not path.parent.is_dir():
            raise StoreError(f"{path}: directory {path.parent} does not exist")
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600))
        except FileExistsError:
            if not path.is_file():  # a dangling symbolic link: SQLite would make its target, 0644
                raise StoreError(f"{path}: not a regular file") from None
            # else another process made it meanwhile: opened (and its tables checked) as any existing file
        except OSError as exc:
            raise StoreError(f"{path}: cannot create: {exc.strerror}") from exc
    elif not path.is_file():
        raise StoreError(f"{path}: not a regular file")
    try:
        return sqlite3.connect(read_only_uri(path) if read_only else path, isolation_level=None,
                               check_same_thread=False, timeout=10.0, uri=read_only)
    except sqlite3.Error as exc:
        raise StoreError(f"{path}: cannot open: {exc}") from exc


def check_or_create(db: sqlite3.Connection, path: Path, *, read_only: bool, tx: _Tx, create: bool = True) -> None:
    """Create the tables in an empty file (``create`` only: an empty file given to ``resume`` is refused and
    stays empty), or check (and migrate, through the store's ``tx``) an existing one. Creating is one
    ``BEGIN IMMEDIATE`` transaction that looks again once it holds the lock: of two processes making the
    same new file, the second finds the first's tables and only checks them."""
    tables = _tables(db)
    if not tables and (read_only or not create):
        raise StoreError(f"{path}: an empty database, not a harness-lab checkpoint database" if read_only else
                         f"{path}: an empty file, not a harness-lab store; nothing was written to it")
    if not tables:
        db.execute("BEGIN IMMEDIATE")
        try:
            if not (tables := _tables(db)):
                for sql in _TABLES:
                    db.execute(sql)
                db.execute("INSERT INTO schema_version (app, version) VALUES (?, ?)", (_APP, SCHEMA_VERSION))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        if not tables:
            return
    if "schema_version" not in tables:
        raise StoreError(f"{path}: a SQLite database of another application "
                         f"(tables: {', '.join(sorted(tables))}); refusing to touch it")
    row = db.execute("SELECT app, version FROM schema_version").fetchone()
    if row is None or row[0] != _APP:
        raise StoreError(f"{path}: schema_version names {row[0] if row else 'nothing'!r}, "
                         f"not {_APP!r}; refusing to touch it")
    if int(row[1]) > SCHEMA_VERSION:
        raise StoreError(f"{path}: written by a newer harness-lab (schema {row[1]} > {SCHEMA_VERSION}); "
                         "upgrade harness-lab to read it")
    if read_only:
        pass  # read as it is: schemas 2-5 differ only in newer rows' forms; schema 1 has no blobs to read
    elif int(row[1]) == 1:  # schema 1 -> 2: only a new table; existing rows stay as they are
        tx([(_BLOBS, ()), (_FILES, ()), (_MANIFESTS, ()), ("UPDATE schema_version SET version = ?", (SCHEMA_VERSION,))])
    elif int(row[1]) in (2, 3, 4, 5, 6, 7, 8):  # -> 4, 6, 9: only newer rows' forms change; -> 5: only new files'
        # layout; -> 7: only new tables (the files of steps written from now on); -> 8: the steps' base column (below)
        tx([(_FILES, ()), (_MANIFESTS, ()), ("UPDATE schema_version SET version = ?", (SCHEMA_VERSION,))])
    elif int(row[1]) < SCHEMA_VERSION:
        raise StoreError(f"{path}: schema {row[1]} is older than {SCHEMA_VERSION} and has no migration")
    if not read_only and "leases" not in tables:  # files made before the run lease gain its table
        tx([(LEASES, ())])
    if not read_only and not has_base(db):  # schema <= 7: rows from now on may be checkpoint deltas
        tx([("ALTER TABLE steps ADD COLUMN base INTEGER", ())])
    check = db.execute("PRAGMA quick_check").fetchone()
    if check is None or check[0] != "ok":
        raise StoreError(f"{path}: database is corrupt (quick_check: {check[0] if check else '?'})")


def has_base(db: sqlite3.Connection) -> bool:
    """Whether the file's step rows have the ``base`` column (schema 8; an older file opened read-only has not)."""
    return any(r[1] == "base" for r in db.execute("PRAGMA table_info(steps)"))


def _tables(db: sqlite3.Connection) -> set[str]:
    return {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def read_only_uri(path: Path) -> str:
    """The URI that opens ``path`` read-only: ``immutable`` too when no log can be read or made beside it
    (a read-only folder and no ``-wal``: a reader would need to create ``-shm``, so SQLite refuses)."""
    uri = f"{path.resolve().as_uri()}?mode=ro"
    side = path.parent
    if not os.access(side, os.W_OK) and not path.with_name(path.name + "-wal").exists():
        uri += "&immutable=1"
    return uri


def side_files(path: Path) -> tuple[Path, Path]:
    """The write-ahead log and its shared-memory index beside ``path`` (``-wal``, ``-shm``)."""
    return path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")


def tidy_side_files(path: Path) -> None:
    """Remove the empty ``-wal``/``-shm`` a read-only connection (now closed) made beside ``path``.

    A ``mode=ro`` reader of a WAL file in a writable folder creates both, and cannot remove them: SQLite
    deletes them on the last close only after checkpointing, which a read-only connection may not do.
    So a plain connection is opened and closed: its close is SQLite's own last-close, which removes them
    only if its exclusive lock proves no other connection (a writer that started meanwhile, another
    reader) has the file open; the log is empty, so nothing is written to the database. ``immutable=1``
    instead would make nothing, but is unsafe in a writable folder: a writer that starts meanwhile
    changes pages under a reader that takes no locks.
    """
    wal, shm = side_files(path)
    try:
        if wal.stat().st_size != 0 or not shm.exists() or not os.access(path, os.W_OK):
            return
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=rw", uri=True, isolation_level=None, timeout=0.0)
        try:
            db.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
        finally:
            db.close()
    except (OSError, sqlite3.Error):  # tidying only: what cannot be tidied is left as it is
        return
