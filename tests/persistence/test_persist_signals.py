"""Real signals: a SIGKILLed process resumes to the uninterrupted state; SIGTERM checkpoints and
reports; the heartbeat beats and the watchdog marks a silent run stuck."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from persisthelpers import CountingOutbox, outcome, push_run

from harness_lab import Run, RunState
from harness_lab.loop.approval import AutoApprove
from harness_lab.persistence.heartbeat import HeartbeatThread, Watchdog
from harness_lab.store import SQLiteStore

HERE = Path(__file__).resolve().parent

# The child parks itself right after the effect of step 5 (the report write) and waits to be killed.
CHILD = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    sys.path[:0] = [{here!r}, {tests!r}]  # persisthelpers, and runhelpers beside the conftest
    from persisthelpers import CountingOutbox, push_run
    from harness_lab.store import SQLiteStore
    run = push_run(Path({ws!r}), SQLiteStore({db!r}), CountingOutbox())
    real = run.executor.execute
    def execute(action, idempotency_key):
        result = real(action, idempotency_key=idempotency_key)
        if run.step_no == {step}:
            Path({marker!r}).write_text("effect applied")
            time.sleep(60)
        return result
    run.executor.execute = execute
    run.run()
""")


def _wait_for(path: Path, proc: subprocess.Popen[bytes], seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert proc.poll() is None, "child exited before the kill point"
        assert time.monotonic() < deadline, "child never reached the kill point"
        time.sleep(0.02)


def test_sigkill_after_the_effect_resumes_to_the_uninterrupted_state(tmp_path: Path) -> None:
    reference = push_run(tmp_path / "ref", None, CountingOutbox())
    reference.run()
    db, ws, marker = tmp_path / "runs.sqlite", tmp_path / "ws", tmp_path / "marker"
    code = CHILD.format(here=str(HERE), tests=str(HERE.parent), ws=str(ws), db=str(db), step=5, marker=str(marker))
    with subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.DEVNULL) as proc:
        _wait_for(marker, proc)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    store = SQLiteStore(db, create=False)
    last = store.last_step("R1")
    assert last is not None and last.step == 4, "step 5's effect landed, its checkpoint did not"
    resumed = Run.resume(store, "R1", effects=CountingOutbox(), approver=AutoApprove())
    assert resumed.resume_report is not None and resumed.resume_report.ok, resumed.resume_report
    resumed.run()
    assert outcome(resumed) == outcome(reference)
    assert store.integrity_check() == "ok"


SLOW = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    sys.path[:0] = [{here!r}, {tests!r}]  # persisthelpers, and runhelpers beside the conftest
    from persisthelpers import ACTIONS, CountingOutbox, push_run
    from harness_lab.persistence.heartbeat import drive
    from harness_lab.store import SQLiteStore
    store = SQLiteStore({db!r})
    reads = [{{"kind": "read_evidence", "id": i}} for i in ("harness-boundary", "acceptance-snapshot", "budget-gates")]
    run = push_run(Path({ws!r}), store, CountingOutbox(), actions=reads * 200, max_decisions=500)
    run.gates.repeat_limit = 10**6
    real = run.step
    def step():
        time.sleep(0.02)
        return real()
    run.step = step
    print("started", flush=True)
    sys.exit(143 if drive(run, store, lambda r: None, heartbeat_s=0.02, grace_s=5.0) else 0)
""")


def test_sigterm_checkpoints_writes_a_report_and_stops(tmp_path: Path) -> None:
    db = tmp_path / "runs.sqlite"
    code = SLOW.format(here=str(HERE), tests=str(HERE.parent), ws=str(tmp_path / "ws"), db=str(db))
    with subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL) as proc:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"started"
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 143
    store = SQLiteStore(db, create=False)
    last = store.last_step("R1")
    assert last is not None and last.step > 0
    reports = store.reports("R1")
    assert len(reports) == 1 and f"steps: {last.step}" in reports[0] and "SIGTERM" in reports[0]
    assert store.run_info("R1").status == "stopped"
    beat = store.last_beat("R1")
    assert beat is not None and beat.pid == proc.pid
    resumed = Run.resume(store, "R1", effects=CountingOutbox())
    assert resumed.step_no == last.step and resumed.state is RunState.RUNNING


def test_heartbeat_beats_and_watchdog_marks_a_silent_run_stuck(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.sqlite")
    run = push_run(tmp_path / "ws", store, CountingOutbox())
    run.step()
    watchdog = Watchdog(store, timeout_s=0.2)
    assert watchdog.check("R1").status == "no_heartbeat"
    with HeartbeatThread(store, run, interval_s=0.02) as beat:
        time.sleep(0.1)
        assert beat.beats >= 2
        assert watchdog.check("R1").status == "alive"
        time.sleep(0.3)  # beats keep coming, but no step completes: alive yet stuck
        verdict = watchdog.check("R1")
    assert verdict.status == "stuck" and "no step completed" in verdict.reason
    assert store.run_info("R1").status == "stuck"
    time.sleep(0.25)  # the beats stopped too
    assert "no heartbeat" in watchdog.check("R1").reason
