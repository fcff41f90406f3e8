"""Copying the write-ahead log back into the database file, off the writing step's path.

SQLite's automatic checkpoint runs inside the ``COMMIT`` that takes the log past 1,000 pages: that
step waits while the log is copied and synced (two fsyncs). For a store committing a row per step
that is one step in ~400 waiting 8-30 ms: ~20 µs a step on average, most of it disk latency. So the
writer turns the automatic checkpoint off and its store copies the log on a thread of its own, on a
connection of its own, in ``PASSIVE`` mode: it never blocks the writer, and a commit stays durable the
moment it returns, as before (nothing about the log's own writes changes).

The log can start over only when a write begins with all of it copied, which a background copy
racing a busy writer never sees. So after ``FINISH_EVERY`` commits the writer runs one ``PASSIVE``
checkpoint itself, between its own transactions: it finds little left to copy, and the next write
starts the log over. The log thus stays under about ``FINISH_EVERY`` commits' pages (~5-10 MB for a
loop of no-op steps). If the background thread cannot run (a forked child, an error), the writer's
own checkpoints still keep the log bounded.

The thread copies once in each such cycle, at ``BACKGROUND_AT`` commits, 128 before the writer's own
checkpoint: each copy costs two syncs whatever it moves (measured: a copy every 128 commits cost ~6 µs of
CPU a step, one a cycle ~2.7), and the writer's own checkpoint takes 10-18 ms of wall time either way.
"""

from __future__ import annotations

import sqlite3
import threading
import weakref
from pathlib import Path

__all__ = ["LogCopier"]

FINISH_EVERY = 2048  # commits between two of the writer's own checkpoints (the log restarts after one)
BACKGROUND_AT = FINISH_EVERY - 128  # the commit of each cycle at which the thread copies the log
_RETRY_AFTER = 8  # commits before the writer tries again when its checkpoint could not finish


class LogCopier:
    """The write-ahead log copier of one writing connection (see the module docstring)."""

    def __init__(self, owner: object, path: Path, writer: sqlite3.Connection) -> None:
        self._path, self._writer = path, writer
        self._commits = 0  # since the log last started over
        self._state = _Shared()
        self._thread: threading.Thread | None = None
        # A store dropped without close() stops its thread too (the thread holds no reference to it).
        weakref.finalize(owner, self._state.stop)

    @property
    def background_copies(self) -> int:
        """Background checkpoints that copied something (for tests and benchmarks)."""
        return self._state.copies

    def committed(self) -> None:
        """The writer committed a step (call with the store's lock held)."""
        self._commits += 1
        if self._commits == BACKGROUND_AT:
            self._request()
        elif self._commits >= FINISH_EVERY:
            # No background copy was asked for since BACKGROUND_AT: it has most likely ended, and this
            # one does not find the checkpoint lock taken.
            try:
                busy, log, copied = self._writer.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            except sqlite3.Error:
                busy = 1  # the row is committed already; a broken file fails the next commit loudly
            # Busy: a background copy still holds the checkpoint lock; not all copied: a reader holds
            # an old snapshot. Either way try again a few commits later, not at every commit.
            self._commits = 0 if (busy == 0 and log == copied) else FINISH_EVERY - _RETRY_AFTER

    def close(self) -> None:
        self._state.stop()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=30)

    def _request(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=_copy_loop, args=(self._path, self._state),
                                            name=f"harness-lab wal copier {self._path.name}", daemon=True)
            self._thread.start()
        self._state.wake.set()


class _Shared:
    """What the writer and its copier thread share: never the store itself."""

    def __init__(self) -> None:
        self.wake = threading.Event()
        self.stopped = False
        self.copies = 0

    def stop(self) -> None:
        self.stopped = True
        self.wake.set()


def _copy_loop(path: Path, state: _Shared) -> None:
    try:
        db = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=10.0)
    except sqlite3.Error:
        return  # the writer's own checkpoints keep the log bounded
    try:
        while True:
            state.wake.wait()
            state.wake.clear()
            if state.stopped:
                return
            _busy, _log, copied = db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            if copied > 0:
                state.copies += 1
    except sqlite3.Error:
        return  # the file went away or broke: the writer reports that on its next commit
    finally:
        db.close()
