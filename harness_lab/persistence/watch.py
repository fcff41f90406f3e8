"""The supervisor behind ``harness-lab watch``: the watchdog over every run of a store, and what to do
with a stuck one.

One pass (:meth:`Watcher.scan`) opens the store read-only and judges each run with
:meth:`Watchdog.judge <harness_lab.persistence.heartbeat.Watchdog.judge>` (alive / stuck / settled / no_heartbeat).
Only a stuck run makes it write: the run is marked ``stuck`` with its reason and, with ``resume``, a
restart report is added and ``harness-lab resume`` starts in a child process of its own session (a
crash of the resumed run does not take the watcher down, and a Ctrl-C of the watcher does not stop the
run; the run lease makes a second resume of the same run fail in one line). With ``alert`` (a command
line of the user's), the command runs once per stuck run and watcher process, through ``/bin/sh``, with
the run id, the verdict and its reason in environment variables (``HARNESS_LAB_RUN_ID``,
``HARNESS_LAB_WATCH_STATUS``, ``HARNESS_LAB_WATCH_REASON``, ``HARNESS_LAB_DB``): nothing read from the
store is ever spliced into a command line, and a run id goes to ``resume`` as one argv item.

The restart budget: a run is resumed at most ``max_restarts`` times over its life in the store (the
restart reports count them, so a watcher run from cron every minute keeps the same count); then it is
reported ``given_up``, and with ``alert`` the command hears of it. A run that is stuck while its process
lives (hung: beats without a step completed, or no beat at all) cannot be resumed from here: its lease is
held, so the child is refused in one line (shown as its exit) and the budget runs down to ``given_up``;
stop that process first. The store is untrusted input: a run id
that could not have been made (a control character) is listed, escaped, and never resumed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Literal

from ..errors import HarnessLabError, StoreError
from ..store import SQLiteStore, Store
from .checkpoint import check_run_id
from .heartbeat import Watchdog, WatchdogVerdict

__all__ = ["RESTART_HEADER", "WatchLine", "Watcher"]

RESTART_HEADER = "# Watchdog restart "  # the head of a restart report: the budget counts these

# The watchdog's four, given_up (the restart budget is spent) and unreadable (an edited row of the run).
Status = Literal["alive", "stuck", "settled", "no_heartbeat", "given_up", "unreadable"]


@dataclass(frozen=True)
class WatchLine:
    """One run's verdict in one pass, and what the watcher did about it (``action``: "" if nothing)."""

    run_id: str
    status: Status
    reason: str
    action: str = ""

    def text(self) -> str:
        """One printable line (control characters of store text escaped)."""
        tail = f" -> {self.action}" if self.action else ""
        return f"{_shown(self.run_id)}: {self.status}: {_shown(self.reason)}{tail}"


@dataclass
class _Child:
    run_id: str
    process: subprocess.Popen[bytes]
    log: IO[bytes]


class Watcher:
    """Judges every run of the SQLite store at ``db`` (see the module docstring).

    ``resume``: resume stuck runs in child processes (``heartbeat_s``: their heartbeat interval);
    ``alert``: a shell command run for each stuck or given-up run (``alert_timeout_s`` at most, then
    its process group is killed). A run a model drove is resumed with ``--model``: the endpoint comes from
    the watcher's environment (``HARNESS_LAB_OPENAI_*``), as for a ``resume`` typed by hand. Both: the command hears of each restart and of a give-up."""

    def __init__(self, db: str | os.PathLike[str], *, timeout_s: float = 90.0, resume: bool = False,
                 alert: str | None = None, max_restarts: int = 3, heartbeat_s: float = 30.0,
                 alert_timeout_s: float = 60.0) -> None:
        if max_restarts < 0:
            raise ValueError(f"max_restarts: must be >= 0, got {max_restarts}")
        if not timeout_s > 0:
            raise ValueError(f"timeout_s: must be > 0 seconds, got {timeout_s!r}")
        if not alert_timeout_s > 0:
            raise ValueError(f"alert_timeout_s: must be > 0 seconds, got {alert_timeout_s!r}")
        if not heartbeat_s > 0:
            raise ValueError(f"heartbeat_s: must be > 0 seconds, got {heartbeat_s!r}")
        self.db = Path(db)
        self.timeout_s, self.resume, self.alert = timeout_s, resume, alert
        self.max_restarts, self.heartbeat_s, self.alert_timeout_s = max_restarts, heartbeat_s, alert_timeout_s
        self.children: list[_Child] = []
        self._alerted: set[str] = set()  # one alert per stuck run and watcher process, until it is not stuck
        self._writer: SQLiteStore | None = None

    # -- one pass -----------------------------------------------------------------------------------
    def scan(self, now: float | None = None) -> list[WatchLine]:
        """Judge every run (the store opened read-only); act on the stuck ones; one line a run."""
        if not self.db.is_file():  # read-only, SQLite would refuse it too; this says which file, before it is made
            raise StoreError(f"{self.db}: " + ("a directory, not a store file" if self.db.is_dir() else
                                               "no such store file"))
        store = SQLiteStore(self.db, read_only=True)
        try:
            watchdog = Watchdog(store, self.timeout_s)
            verdicts = [_judge(watchdog, run_id, now) for run_id in store.run_ids()]
            stuck = {v.run_id: (store.run_info(v.run_id), _restarts(store.reports(v.run_id)))
                     for v in verdicts if isinstance(v, WatchdogVerdict) and v.status == "stuck"}
        finally:
            store.close()
        busy = {c.run_id for c in self.children if c.process.poll() is None}
        lines = []
        try:
            for verdict in verdicts:
                if isinstance(verdict, WatchLine):
                    lines.append(verdict)
                    continue
                if verdict.status != "stuck":
                    self._alerted.discard(verdict.run_id)
                    lines.append(WatchLine(verdict.run_id, verdict.status, verdict.reason))
                    continue
                info, restarts = stuck[verdict.run_id]
                lines.append(self._act(verdict.run_id, verdict.reason, info.status, info.status_reason, restarts,
                                       busy, _driven_by_model(info.spec)))
        finally:
            if self._writer is not None:
                self._writer.close()
                self._writer = None
        return lines

    def _act(self, run_id: str, reason: str, status: str, status_reason: str, restarts: int,
             busy: set[str], model: bool) -> WatchLine:
        if run_id in busy:  # its resume was started by this watcher and has not beaten yet
            return WatchLine(run_id, "stuck", reason, "a resume started by this watcher is still starting")
        try:
            check_run_id(run_id)
        except StoreError:
            return WatchLine(run_id, "stuck", reason, "not resumed: the id holds a control character, so no "
                                                      "harness-lab run made it (an edited store)")
        given_up = self.resume and restarts >= self.max_restarts
        mark = f"given up after {restarts} restart(s): {reason}" if given_up else reason
        # Marked once (its reason names an age that grows every pass), and once more when given up.
        if status != "stuck" or (given_up and not status_reason.startswith("given up")):
            self._write(lambda s: s.set_status(run_id, "stuck", mark))
        if given_up:
            line = WatchLine(run_id, "given_up", reason, f"restart budget of {self.max_restarts} spent; resume it "
                                                         "by hand once its cause is fixed")
        elif self.resume:
            line = WatchLine(run_id, "stuck", reason, self._start_resume(run_id, reason, restarts + 1, model))
        else:
            line = WatchLine(run_id, "stuck", reason)
        if self.alert is not None and run_id not in self._alerted:
            self._alerted.add(run_id)
            line = WatchLine(line.run_id, line.status, line.reason, self._run_alert(line))
        return line

    def _write(self, change: Callable[[Store], None]) -> None:
        """The store is opened for writing (once a pass) only when something must be written: a clean pass
        writes nothing. Each write is its own transaction, committed before a child is started."""
        if self._writer is None:
            self._writer = SQLiteStore(self.db, create=False)
        change(self._writer)

    # -- resume in a child process ------------------------------------------------------------------
    def _start_resume(self, run_id: str, reason: str, restart: int, model: bool) -> str:
        report = (f"{RESTART_HEADER}{restart}/{self.max_restarts}: {run_id}\n\nStuck: {reason}\n\n"
                  f"Resumed by `harness-lab watch` (pid {os.getpid()}) in a child process.\n")
        self._write(lambda s: s.add_report(run_id, time.time(), report))
        # The child's output goes to a temporary file (read when it ends): a pipe nobody reads would block it.
        log = tempfile.TemporaryFile(prefix="harness-lab-watch-")
        argv = [sys.executable, "-m", "harness_lab.cli", "resume", "--db", str(self.db), "--run-id", run_id,
                "--heartbeat", str(self.heartbeat_s)]
        if model:  # a model drove it: resume asks for --model; the endpoint comes from this environment
            argv.append("--model")
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        self.children.append(_Child(run_id, process, log))
        return f"resuming (restart {restart}/{self.max_restarts}, pid {process.pid})"

    def reap(self, wait: bool = False) -> list[str]:
        """Lines for the resume children that ended (``wait``: wait for all of them first)."""
        ended, lines = [], []
        for child in self.children:
            if wait:
                child.process.wait()
            if child.process.poll() is not None:
                ended.append(child)
        for child in ended:
            self.children.remove(child)
            child.log.seek(0)
            out = child.log.read().decode("utf-8", "replace").splitlines()
            child.log.close()
            last = next((line for line in reversed(out) if line.strip()), "no output")
            lines.append(f"{_shown(child.run_id)}: resume exited {child.process.returncode}: {_shown(last)}")
        return lines

    # -- the alert command --------------------------------------------------------------------------
    def _run_alert(self, line: WatchLine) -> str:
        env = {**os.environ, "HARNESS_LAB_RUN_ID": line.run_id, "HARNESS_LAB_WATCH_STATUS": line.status,
               "HARNESS_LAB_WATCH_REASON": line.reason, "HARNESS_LAB_DB": str(self.db)}
        assert self.alert is not None
        try:
            process = subprocess.Popen(["/bin/sh", "-c", self.alert], env=env, stdin=subprocess.DEVNULL,
                                       start_new_session=True)
        except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the reason (an edited store)
            return f"alert not run: {exc}"
        try:
            code = process.wait(self.alert_timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)  # the shell and whatever it started
            process.wait()
            return f"alert killed after {self.alert_timeout_s:g}s"
        return f"alert exited {code}"


def _judge(watchdog: Watchdog, run_id: str, now: float | None) -> WatchdogVerdict | WatchLine:
    """The verdict, or an ``unreadable`` line: one edited row does not stop the watch of the other runs."""
    try:
        return watchdog.judge(run_id, now)
    except HarnessLabError as exc:
        return WatchLine(run_id, "unreadable", str(exc))


def _driven_by_model(spec: object) -> bool:
    proposer = spec.get("proposer") if isinstance(spec, dict) else None
    return isinstance(proposer, dict) and proposer.get("kind") == "OpenAICompatProposer"


def _restarts(reports: list[str]) -> int:
    return sum(1 for text in reports if text.startswith(RESTART_HEADER))


def _shown(text: str) -> str:
    """Store text as one printable line: a newline or an escape sequence in it cannot forge lines."""
    return text if text.isprintable() else "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)
