"""The run lease: which process writes a run of a :class:`~harness_lab.store.SQLiteStore` file.

One row per run being written (``leases``): the holder's pid, host, identity (boot and start time:
:func:`harness_lab.process_id.process_identity`), a random token of the store object that took it, and
since when. Taking it is one ``BEGIN IMMEDIATE`` transaction (read the row, judge it, write ours), so of
two processes that start together exactly one gets it; the other is refused in one line naming the
holder, with nothing written. A run nobody holds (a new run: the usual case) is taken by one
``INSERT OR IGNORE``, its own transaction, and a fork's by an ``INSERT`` inside its registering
transaction (:func:`take_new`): the row is written only where none is, so nothing needs judging. A row whose holder is dead (same host, and its pid gone or now another process: the identity
differs) is taken over, so kill -9 and ``resume`` keep working. A holder on another host cannot be
judged from here and is refused. The same process may take its run again (another store object on the
file, as in-process tests and a notebook do): one process is one writer. The store deletes its rows on
close; a process that dies leaves its row for the next one to take over.
"""

from __future__ import annotations

import os
import secrets
import sqlite3
import time
from dataclasses import dataclass

from ..errors import RunStateError
from ..process_id import host_name, process_alive, process_identity

__all__ = ["LEASES", "Holder", "release", "take", "take_new"]

LEASES = ("CREATE TABLE IF NOT EXISTS leases (run_id TEXT PRIMARY KEY, pid INTEGER NOT NULL, host TEXT NOT NULL,"
          " started TEXT NOT NULL, token TEXT NOT NULL, since REAL NOT NULL)")

# One row, written three ways: where none is (failing, or doing nothing, on a row there) or over one judged.
_ROW = "INTO leases (run_id, pid, host, started, token, since) VALUES (?, ?, ?, ?, ?, ?)"
_TAKE_NEW, _TAKE_FREE, _TAKE_OVER = f"INSERT {_ROW}", f"INSERT OR IGNORE {_ROW}", f"INSERT OR REPLACE {_ROW}"


@dataclass(frozen=True)
class Holder:
    pid: int
    host: str
    started: str  # process_identity(pid), "" if /proc could not tell
    token: str  # one per store object

    @classmethod
    def me(cls) -> Holder:
        pid = os.getpid()
        return cls(pid, host_name(), process_identity(pid), secrets.token_hex(8))

    def row(self, run_id: str) -> tuple[str | int | float, ...]:
        """The lease row of ``run_id`` taken by this holder now."""
        return (run_id, self.pid, self.host, self.started, self.token, time.time())

    def gone(self) -> bool:
        """Whether this (recorded) holder is dead: judged on its own host only."""
        if self.host != host_name():
            return False
        if self.started:
            return process_identity(self.pid) != self.started  # gone, a zombie, or the pid reused
        return not process_alive(self.pid)


def take(db: sqlite3.Connection, run_id: str, me: Holder) -> None:
    """Take ``run_id``'s lease for ``me`` in one transaction, or raise :class:`RunStateError` naming the
    holder (the transaction rolled back: nothing written). Call with the store's lock held."""
    if db.execute(_TAKE_FREE, me.row(run_id)).rowcount == 1:
        return  # no row was there: ours now (two statements fewer than the judged transaction below)
    db.execute("BEGIN IMMEDIATE")
    try:
        row = db.execute("SELECT pid, host, started, token, since FROM leases WHERE run_id = ?", (run_id,)).fetchone()
        if row is not None and row[3] != me.token:
            holder = Holder(int(row[0]), str(row[1]), str(row[2]), str(row[3]))
            if not (holder.host == me.host and holder.pid == me.pid) and not holder.gone():
                since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(float(row[4])))
                raise RunStateError(f"run {run_id!r} is held by pid {holder.pid} on host {holder.host} since {since} "
                                    "(another harness-lab process writes it); nothing was written: wait for it "
                                    "to end, or stop it first")
        db.execute(_TAKE_OVER, me.row(run_id))
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def take_new(run_id: str, me: Holder) -> tuple[str, tuple[str | int | float, ...]]:
    """The statement that takes a lease nobody holds inside another transaction (a new run's registering
    row): it fails on a row there already (a UNIQUE constraint, the transaction rolled back), which
    :func:`take` then judges."""
    return _TAKE_NEW, me.row(run_id)


def release(db: sqlite3.Connection, run_ids: list[str], me: Holder) -> None:
    """Give back the leases ``me`` holds of ``run_ids`` (a row another process took over stays)."""
    db.executemany("DELETE FROM leases WHERE run_id = ? AND token = ?", [(r, me.token) for r in run_ids])
