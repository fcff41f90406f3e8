"""The reading half of :class:`~harness_lab.store.SQLiteStore`: every query (runs, step rows and their
history, blobs, the ledger's entries, heartbeats, reports), all that a ``read_only=True`` store uses.

Step rows are read by one key range whatever the file's layout: ``id`` in a file of schema 5 or later
(``run_no * SPAN + step``, see ``_sqlite_schema._TABLES``), ``(run_id, step)`` in an older one. A row whose
checkpoint is a delta (schema 8) is handed out with its checkpoint whole again (``store/fold.py``).
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable, Collection
from dataclasses import replace
from pathlib import Path
from typing import Any, get_args

from ..errors import StoreError
from ._sqlite_schema import SPAN
from .base import EffectEntry, EffectStatus, Heartbeat, HistoryEntry, RunInfo, StoredStep, _unknown_run
from .fold import WHOLE, fold

__all__ = ["SQLiteReads"]

_IN_MAX = 500  # values bound in one IN (...): under SQLite's oldest limit of 999 parameters

_STEP_COLS = "run_id, step, at, record, checkpoint, context"
_BASE_COLS = f"{_STEP_COLS}, base"  # schema 8 (an older file opened read-only has no base column)
# An intent (or a resolved one) whose step's row exists is committed: that row's transaction settled it
# (schema 9; it was an UPDATE in the row's transaction before, which costs an effect step three statements).
_SETTLED = ("SELECT key, run_id, step, tool, CASE WHEN status IN ('intent', 'resolved') AND EXISTS (SELECT 1 FROM "
            "steps WHERE {row}) THEN 'committed' ELSE status END, detail FROM effects")
_KEYED_ROW = "id = (SELECT run_no FROM runs WHERE run_id = effects.run_id) * 4294967296 + effects.step"
_PAIR_ROW = "run_id = effects.run_id AND step = effects.step"  # files of schema 4 or older: keyed by the pair
_STATUSES = frozenset(get_args(EffectStatus))
# The manifest rows that fold to a step's files: from the base of the last row at or before it (NULL: none).
_MANIFEST_ROWS = ("SELECT step, text FROM manifests WHERE run_id = ? AND step <= ? AND step >= (SELECT base FROM "
                  "manifests WHERE run_id = ? AND step <= ? ORDER BY step DESC LIMIT 1) ORDER BY step")


class SQLiteReads:
    """The queries of a SQLite store; :class:`~harness_lab.store.SQLiteStore` opens the file and adds the writes."""

    path: Path
    _db: sqlite3.Connection
    _lock: threading.Lock  # the heartbeat thread shares the connection
    _keyed: bool  # step rows keyed by one integer (schema 5 or later)
    _run_nos: dict[str, int]  # run id -> run_no, as read (a keyed file's step rows)
    _cols: str  # the step rows' columns read (_BASE_COLS where the file has the base column)

    def _q(self, sql: str, args: tuple[Any, ...] = ()) -> list[Any]:
        with self._lock:
            try:
                return self._db.execute(sql, args).fetchall()
            except sqlite3.Error as exc:
                raise StoreError(f"{self.path}: {exc}") from exc

    # -- runs -----------------------------------------------------------------------------------
    def has_run(self, run_id: str) -> bool:
        return bool(self._q("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)))

    def run_info(self, run_id: str) -> RunInfo:
        rows = self._q("SELECT spec, created_at, status, status_reason FROM runs WHERE run_id = ?", (run_id,))
        if not rows:
            raise StoreError(f"{self.path}: " + _unknown_run(run_id, self.run_ids()))
        spec, created, status, reason = rows[0]
        # A store is a file anyone with write access can edit: the columns are checked, not trusted.
        try:
            if not isinstance(spec, str):
                raise TypeError(f"a {type(spec).__name__}, not JSON text")
            parsed = json.loads(spec)
        except (TypeError, ValueError, RecursionError) as exc:
            raise StoreError(f"{self.path}: run {run_id!r}: its stored spec is unreadable: "
                             f"{str(exc).splitlines()[0][:200]}") from None
        if type(created) not in (int, float) or not isinstance(status, str) or not isinstance(reason, str):
            raise StoreError(f"{self.path}: run {run_id!r}: its row is unreadable: created_at, status or "
                             "status_reason of the wrong type")
        return RunInfo(run_id, parsed, float(created), status, reason)

    def run_ids(self) -> list[str]:
        return [r[0] for r in self._q("SELECT run_id FROM runs ORDER BY run_id")]

    # -- steps ----------------------------------------------------------------------------------
    def _run_no(self, run_id: str) -> int | None:
        run_no = self._run_nos.get(run_id)
        if run_no is None:
            rows = self._q("SELECT run_no FROM runs WHERE run_id = ?", (run_id,))
            if not rows:
                return None
            run_no = self._run_nos[run_id] = int(rows[0][0])
        return run_no

    def _range(self, cols: str, run_id: str, start: int, end: int, *, last: bool = False,
               first: bool = False) -> list[Any]:
        """``cols`` of the run's rows ``start..end`` by step (only the last, or first, of them with ``last``, ``first``)."""
        order = " DESC LIMIT 1" if last else " LIMIT 1" if first else ""
        if not self._keyed:
            return self._q(f"SELECT {cols} FROM steps WHERE run_id = ? AND step >= ? AND step <= ? ORDER BY step{order}",
                           (run_id, start, end))
        run_no, start, end = self._run_no(run_id), max(start, 0), min(end, SPAN - 1)
        if run_no is None or start > end:
            return []
        return self._q(f"SELECT {cols} FROM steps WHERE id >= ? AND id <= ? ORDER BY id{order}",
                       (run_no * SPAN + start, run_no * SPAN + end))

    def blob(self, sha256: str) -> str | None:
        rows = self._q("SELECT text FROM blobs WHERE sha256 = ?", (sha256,))
        return str(rows[0][0]) if rows else None

    def file_data(self, sha256: str) -> bytes | None:
        rows = self._q_files("SELECT data FROM files WHERE sha256 = ?", (sha256,))
        return bytes(rows[0][0]) if rows else None

    def files_data(self, sha256s: Collection[str]) -> dict[str, bytes]:
        return {str(sha): bytes(data) for sha, data in self._in("SELECT sha256, data FROM files", sha256s, self._q_files)}

    def blob_texts(self, sha256s: Collection[str]) -> dict[str, str]:
        return {str(sha): str(text) for sha, text in self._in("SELECT sha256, text FROM blobs", sha256s, self._q)}

    def _in(self, select: str, sha256s: Collection[str], query: Callable[[str, tuple[Any, ...]], list[Any]]) -> list[Any]:
        """The rows of ``select`` whose sha256 is one of ``sha256s``: one statement per _IN_MAX of them, not one each."""
        shas = list(dict.fromkeys(sha256s))
        rows: list[Any] = []
        for at in range(0, len(shas), _IN_MAX):
            part = tuple(shas[at:at + _IN_MAX])
            rows += query(f"{select} WHERE sha256 IN ({','.join('?' * len(part))})", part)
        return rows

    def manifests(self, run_id: str, step: int) -> list[tuple[int, str]]:
        rows = self._q_files(_MANIFEST_ROWS, (run_id, step, run_id, step))  # one statement: Run.at reads two steps
        return [(int(n), str(t)) for n, t in rows]

    def _q_files(self, sql: str, args: tuple[Any, ...]) -> list[Any]:
        """A query of the schema-7 tables; an older file opened read-only has none: no files kept."""
        try:
            return self._q(sql, args)
        except StoreError as exc:
            if "no such table" in str(exc):
                return []
            raise

    def contexts(self, run_id: str, start: int, end: int) -> list[tuple[int, str | None]]:
        rows = self._range("step, context", run_id, start, end)
        if not rows:
            self.run_info(run_id)
        return [(int(n), c) for n, c in rows]

    def history(self, run_id: str) -> list[HistoryEntry]:
        self.run_info(run_id)
        return [HistoryEntry(run_id, n, at) for n, at in self._range("step, at", run_id, -(2**62), 2**62)]

    def last_step(self, run_id: str) -> StoredStep | None:
        rows = self._range(self._cols, run_id, -(2**62), 2**62, last=True)
        return self._whole(rows)[0] if rows else None

    def first_step(self, run_id: str) -> StoredStep | None:
        rows = self._range(self._cols, run_id, -(2**62), 2**62, first=True)
        return self._whole(rows)[0] if rows else None

    def _stored(self, row: tuple[Any, ...]) -> StoredStep:
        """A step row, its columns of the types every reader assumes (an edited file may hold any)."""
        run_id, step, at, record, checkpoint, context = row[:6]
        if (type(step) is not int or type(at) not in (int, float) or not isinstance(record, str)
                or not isinstance(checkpoint, str) or not (context is None or isinstance(context, str))
                or not (len(row) < 7 or row[6] is None or type(row[6]) is int)):
            raise StoreError(f"{self.path}: the row of run {run_id!r} step {step!r} is unreadable: a column holds "
                             "a value of the wrong type (step a whole number, at a number, record, checkpoint "
                             "and context text, base a whole number)")
        return StoredStep(run_id, step, float(at), record, checkpoint, context)

    def _whole(self, rows: list[tuple[Any, ...]]) -> list[StoredStep]:
        """The rows (of one run, in step order) as stored steps, each checkpoint whole: a delta is folded
        onto the one of the row before (just read), else onto the rows from its ``base`` (read now)."""
        out: list[StoredStep] = []
        for row in rows:
            stored = self._stored(row)
            base = row[6] if len(row) > 6 else None
            if base is not None and base != stored.step and not stored.checkpoint.startswith(WHOLE):
                before = out[-1] if out and out[-1].step == stored.step - 1 and base < stored.step else None
                try:
                    whole = (fold(before.checkpoint, [stored.checkpoint]) if before is not None
                             else self._fold_from(stored.run_id, base, stored.step, stored.checkpoint))
                except (ValueError, TypeError, RecursionError) as exc:
                    raise StoreError(f"checkpoint {stored.run_id}@{stored.step} is unreadable: "
                                     f"{str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__}"
                                     ) from None
                stored = replace(stored, checkpoint=whole)
            out.append(stored)
        return out

    def _fold_from(self, run_id: str, base: int, step: int, delta: str) -> str:
        if not 0 <= base < step:
            raise ValueError(f"its base {base} is not an earlier step")
        rows = self._range("step, checkpoint", run_id, base, step - 1)
        if len(rows) != step - base or rows[0][0] != base or not all(isinstance(c, str) for _, c in rows):
            raise ValueError(f"the rows {base}..{step - 1} its delta builds on are incomplete")
        if not rows[0][1].startswith(WHOLE):
            raise ValueError(f"row {base}, its base, holds no whole checkpoint")
        return fold(rows[0][1], [*(c for _, c in rows[1:]), delta])

    def step(self, run_id: str, step: int) -> StoredStep:
        rows = self._range(self._cols, run_id, step, step)
        if not rows:
            self.run_info(run_id)
            raise StoreError(f"{self.path}: run {run_id!r} has no step {step}")
        return self._whole(rows)[0]

    def steps(self, run_id: str, start: int = 1, end: int | None = None) -> list[StoredStep]:
        self.run_info(run_id)
        return self._whole(self._range(self._cols, run_id, start, end if end is not None else 2**62))

    # -- the side-effect ledger -------------------------------------------------------------------
    def effect(self, key: str) -> EffectEntry | None:
        rows = self._q(f"{self._effect_cols()} WHERE key = ?", (key,))
        return self._effect(rows[0]) if rows else None

    def effects(self, run_id: str, step: int | None = None) -> list[EffectEntry]:
        cols = f"{self._effect_cols()} WHERE run_id = ?"
        rows = (self._q(f"{cols} ORDER BY step", (run_id,)) if step is None
                else self._q(f"{cols} AND step = ? ORDER BY rowid", (run_id, step)))  # effects_by_step index
        return [self._effect(r) for r in rows]

    # -- liveness and reports ---------------------------------------------------------------------
    def last_beat(self, run_id: str) -> Heartbeat | None:
        rows = self._q("SELECT run_id, at, step, progress_at, pid, doing FROM heartbeats WHERE run_id = ?", (run_id,))
        if not rows:
            return None
        _, at, step, progress_at, pid, doing = rows[0]
        if (type(at) not in (int, float) or type(progress_at) not in (int, float) or type(step) is not int
                or type(pid) is not int or not isinstance(doing, str)):
            raise StoreError(f"{self.path}: the heartbeat of run {run_id!r} is unreadable: a column holds a value "
                             "of the wrong type")
        return Heartbeat(run_id, float(at), step, float(progress_at), pid, doing)

    def reports(self, run_id: str) -> list[str]:
        self.run_info(run_id)
        return [r[0] for r in self._q("SELECT text FROM reports WHERE run_id = ? ORDER BY rowid", (run_id,))]

    def integrity_check(self) -> str:
        """``PRAGMA integrity_check``: ``"ok"`` or the problems SQLite found."""
        return "; ".join(str(r[0]) for r in self._q("PRAGMA integrity_check"))


    def _effect_cols(self) -> str:
        return _SETTLED.format(row=_KEYED_ROW if self._keyed else _PAIR_ROW)

    def _effect(self, row: tuple[Any, ...]) -> EffectEntry:
        key, run_id, step, tool, status, detail = row
        try:
            parsed = json.loads(detail) if isinstance(detail, str) else None
        except (ValueError, RecursionError):
            parsed = None
        if (not isinstance(parsed, dict) or type(step) is not int or not isinstance(tool, str)
                or status not in _STATUSES):
            raise StoreError(f"{self.path}: the ledger entry {key!r} of run {run_id!r} is unreadable: its step, "
                             "tool, status or detail (a JSON object) is not of its form")
        return EffectEntry(key, run_id, step, tool, status, parsed)
