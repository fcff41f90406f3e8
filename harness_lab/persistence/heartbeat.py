"""Liveness of long runs (seed 003, 6.2): heartbeat, watchdog, and a graceful SIGTERM window.

* :class:`HeartbeatThread` writes a beat to the store every ``interval_s`` (default 30 s; tests use
  tens of ms): which step the run is at and when it last *completed* a step.
* :class:`Watchdog` (default 90 s) marks a run ``stuck`` in the store when its beats stop (the process
  is gone or hung) or when beats keep coming but no step completed for that long (alive but stuck);
  :meth:`Watchdog.judge` gives the same verdict and writes nothing. ``harness-lab watch``
  (:mod:`harness_lab.persistence.watch`) runs it over a store and resumes or reports the stuck runs.
  A run whose last checkpoint is terminal or waits for a human, or that a SIGTERM stopped (status
  ``stopped``, until it is resumed), is ``settled``: no beat is expected.
* :class:`GracefulStop` turns SIGTERM into a request the loop sees between steps: the last step is
  checkpointed already, a progress report is written, and the loop stops; if the current step does
  not finish within ``window_s`` (default 30 s) the process exits anyway (status 143).
"""

from __future__ import annotations

import os
import shlex
import signal
import sqlite3
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType, TracebackType
from typing import TYPE_CHECKING, Literal

from ..errors import HarnessLabError
from ..process_id import process_alive
from ..records.events import StepRecord
from ..records.states import RunState
from ..store import Heartbeat, Store
from .checkpoint_record import ROW_ERRORS, Checkpoint, row_error

if TYPE_CHECKING:
    from .checkpoint import CheckpointedRun as Run  # a Protocol: no import of run.py (one-way arrows)

__all__ = ["GracefulStop", "HeartbeatThread", "Watchdog", "WatchdogVerdict", "drive", "driver_of", "process_alive",
           "progress_report"]


def driver_of(store: Store, run_id: str, within_s: float = 90.0, now: float | None = None) -> Heartbeat | None:
    """The last beat of ``run_id`` if it says another live process drives the run now: it came from a
    process of this machine that still exists (not this one) less than ``within_s`` ago (a reused
    process id stops counting then)."""
    beat = store.last_beat(run_id)
    now = time.time() if now is None else now
    if beat is None or beat.pid == os.getpid() or not 0 <= now - beat.at < within_s:
        return None
    return beat if process_alive(beat.pid) else None


class HeartbeatThread:
    """Beats for one run from a daemon thread until :meth:`stop` (also a context manager).

    A beat the store refuses (locked, disk full) is tried again at the next interval: the run goes
    on, ``failures`` counts the beats lost, ``last_error`` says why, and stderr says so once when
    beats start failing and once when they resume. A closed store ends the thread (nothing can
    be written to it again)."""

    def __init__(self, store: Store, run: Run, interval_s: float = 30.0) -> None:
        if not interval_s > 0:
            raise ValueError(f"interval_s: must be > 0 seconds, got {interval_s!r}")
        self.store, self.run, self.interval_s = store, run, interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"heartbeat-{run.run_id}", daemon=True)
        self.beats = 0
        self.failures = 0
        self.last_error: str | None = None
        self._failing = False

    def beat(self) -> None:
        run = self.run
        progress = run.checkpoints.last_commit_at if run.checkpoints is not None else time.time()
        doing = f"{run.state.value} at step {run.step_no}"
        self.store.beat(Heartbeat(run.run_id, time.time(), run.step_no, progress, os.getpid(), doing))
        self.beats += 1

    def _loop(self) -> None:
        while not self._stop.is_set() and self._try_beat():
            self._stop.wait(min(self.interval_s, threading.TIMEOUT_MAX))  # inf: only the first and last beat

    def _try_beat(self) -> bool:
        """One beat; a failure is recorded, not raised (it would end the thread, and the watchdog
        would call the live run stuck). False if the store is closed: no beat can follow."""
        try:
            self.beat()
        except Exception as exc:
            self.failures += 1
            self.last_error = f"{type(exc).__name__}: {exc}"
            if _store_closed(exc):
                print(f"harness-lab: heartbeat of run {self.run.run_id} stopped: its store is closed "
                      f"({self.last_error})", file=sys.stderr, flush=True)
                return False
            if not self._failing:
                self._failing = True
                print(f"harness-lab: heartbeat of run {self.run.run_id} failed ({self.last_error}); the run goes "
                      f"on, retrying every {self.interval_s}s", file=sys.stderr, flush=True)
            return True
        if self._failing:
            self._failing = False
            print(f"harness-lab: heartbeat of run {self.run.run_id} beats again ({self.failures} beat(s) lost)",
                  file=sys.stderr, flush=True)
        return True

    def start(self) -> HeartbeatThread:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop beating, with one last beat: where the run stands now (not where the last beat found it)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
            self._try_beat()

    def __enter__(self) -> HeartbeatThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _store_closed(exc: BaseException) -> bool:
    """Whether a store's error comes from its closed database (sqlite3 refuses every call then)."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, sqlite3.ProgrammingError) and "closed" in str(cause):
            return True
        cause = cause.__cause__
    return False


@dataclass(frozen=True)
class WatchdogVerdict:
    run_id: str
    status: Literal["alive", "stuck", "no_heartbeat", "settled"]  # settled: finished, waiting for a human, stopped
    reason: str


class Watchdog:
    """Judges one run from its last beat; :meth:`check` marks a silent run ``stuck`` in the store."""

    def __init__(self, store: Store, timeout_s: float = 90.0) -> None:
        if not timeout_s > 0:
            raise ValueError(f"timeout_s: must be > 0 seconds, got {timeout_s!r}")
        self.store, self.timeout_s = store, timeout_s

    def check(self, run_id: str, now: float | None = None) -> WatchdogVerdict:
        """:meth:`judge`, and a ``stuck`` verdict marked in the store (status ``stuck``, its reason)."""
        verdict = self.judge(run_id, now)
        if verdict.status == "stuck":
            self.store.set_status(run_id, "stuck", verdict.reason)
        return verdict

    def judge(self, run_id: str, now: float | None = None) -> WatchdogVerdict:
        """The verdict on ``run_id``, writing nothing (a store opened read-only will do)."""
        now = time.time() if now is None else now
        info = self.store.run_info(run_id)  # an unknown id (a typo) is an error, not a run that never beat
        beat = self.store.last_beat(run_id)
        if beat is None:
            return WatchdogVerdict(run_id, "no_heartbeat", "the run never beat (not started with a heartbeat)")
        if info.status == "stopped":  # stopped on purpose, with a progress report: not stuck, and its reason stays
            return WatchdogVerdict(run_id, "settled", f"stopped ({info.status_reason}); nothing beats until it is "
                                                      "resumed")
        settled = self._settled(run_id)
        if settled is not None:
            return WatchdogVerdict(run_id, "settled", settled)
        if now - beat.at > self.timeout_s:
            reason = f"no heartbeat for {now - beat.at:.1f}s (limit {self.timeout_s}s); last: {beat.doing}"
        elif beat.pid != os.getpid() and not process_alive(beat.pid):
            reason = f"process {beat.pid} that beat {now - beat.at:.1f}s ago is gone; last: {beat.doing}"
        elif now - beat.progress_at > self.timeout_s:
            reason = f"alive but no step completed for {now - beat.progress_at:.1f}s (limit {self.timeout_s}s); {beat.doing}"
        else:
            return WatchdogVerdict(run_id, "alive", beat.doing)
        return WatchdogVerdict(run_id, "stuck", reason)

    def _settled(self, run_id: str) -> str | None:
        """Why no beat is expected, from the last checkpoint: the run ended, or it waits for a human."""
        row = self.store.last_step(run_id)
        if row is None:
            return None
        try:
            checkpoint = Checkpoint.from_row(row)
        except ROW_ERRORS as exc:  # an edited store: one line, as every other reader of it says
            raise row_error(f"checkpoint {run_id}@{row.step}", exc) from None
        if checkpoint.state.terminal:
            return f"{checkpoint.state.value} at step {checkpoint.step}: the run has ended; nothing should beat"
        if checkpoint.state is RunState.WAITING_FOR_HUMAN:
            return (f"{checkpoint.state.value} at step {checkpoint.step}: parked at a human gate; "
                    "nothing runs until it is decided")
        return None


def progress_report(run: Run, why: str, db: str | os.PathLike[str] | None = None) -> str:
    """What was done, where it stands, what is next: written when a run is stopped from outside.
    ``db``: the store's file, so the resume command it names can be pasted as it is."""
    where = f"--db {shlex.quote(os.fspath(db))} " if db is not None else ""
    last = run.records[-1].summary() if run.records else "no step taken"
    pending = "approve() or reject() the parked proposal" if run.waiting is not None else "the next proposal"
    return (f"# Progress report: {run.run_id}\n\nStopped: {why}\n\n- state: {run.state.value}\n"
            f"- steps: {run.step_no}, decisions {run.usage.decisions}, tool calls {run.usage.tool_calls}\n"
            f"- evidence read: {', '.join(sorted(run.executor.observed)) or 'none'}\n"
            f"- report accepted: {'yes' if run.receipt else 'no'}\n- last step: {last}\n"
            f"- next: {'nothing (terminal)' if run.state.terminal else pending}; resume with "
            f"`harness-lab resume {where}--run-id {shlex.quote(run.run_id)}`\n")


class GracefulStop:
    """``with GracefulStop(window_s=30) as stop: while not stop.requested: run.step()``.

    Python handles signals in the main thread only: entered from another thread it raises a
    :class:`~harness_lab.errors.HarnessLabError` (drive the run from the main thread)."""

    def __init__(self, window_s: float = 30.0, signum: int = signal.SIGTERM) -> None:
        if not window_s >= 0:
            raise ValueError(f"window_s: must be >= 0 seconds, got {window_s!r}")
        self.window_s, self.signum = window_s, signum
        self.requested = False
        self._timer: threading.Timer | None = None
        self._previous: signal._HANDLER = None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.requested:
            return
        self.requested = True
        # The step in progress gets the window to finish and checkpoint; after it, exit regardless.
        self._timer = threading.Timer(min(self.window_s, threading.TIMEOUT_MAX), os._exit, args=(128 + signum,))
        self._timer.daemon = True
        self._timer.start()

    def __enter__(self) -> GracefulStop:
        if threading.current_thread() is not threading.main_thread():
            raise HarnessLabError(f"GracefulStop: Python handles signals in the main thread only, not in thread "
                                  f"{threading.current_thread().name!r}; drive the run from the main thread")
        self._previous = signal.signal(self.signum, self._handle)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
        # None: the handler before was not set from Python (getsignal cannot name it, so nothing can put
        # it back); the signal's default action is the closest restore, never a TypeError.
        signal.signal(self.signum, signal.SIG_DFL if self._previous is None else self._previous)


def drive(run: Run, store: Store, on_step: Callable[[StepRecord], None], *, heartbeat_s: float = 30.0,
          grace_s: float = 30.0) -> bool:
    """Step a checkpointed run to a terminal state or a human gate, beating; True if SIGTERM stopped it
    (the last step is checkpointed and a progress report is in the store). A gate whose timeout has
    passed is closed by one more step (human_timeout, BLOCKED), as :meth:`Run.run` does."""
    # The signal handler first: refused (not the main thread), it leaves no beat for a run that never ran.
    with GracefulStop(grace_s) as stop, HeartbeatThread(store, run, heartbeat_s):
        while run.step_due:
            if stop.requested:
                store.add_report(run.run_id, time.time(),
                                 progress_report(run, "SIGTERM: graceful stop", getattr(store, "path", None)))
                store.set_status(run.run_id, "stopped", f"SIGTERM after step {run.step_no}")
                return True
            on_step(run.step())
    return False
