"""Refused resumes and forks: one line naming the run, step or value; nothing made on disk or in the store."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from persisthelpers import CountingOutbox, push_run

from harness_lab import Run, RunState
from harness_lab.errors import RunStateError, StoreError, WorkspaceError
from harness_lab.loop.approval import Approver, AskHuman, AutoApprove
from harness_lab.loop.scheduler import ExternalLoop, RoundOutcome
from harness_lab.persistence.heartbeat import GracefulStop, HeartbeatThread, Watchdog, drive
from harness_lab.persistence.resume import _CHECKPOINT_ID, load_checkpoint
from harness_lab.records.states import LoopState
from harness_lab.store import InMemoryStore, SQLiteStore


def test_resume_with_the_workspace_deleted_says_so_and_does_not_recreate_it(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.sqlite")
    ws = tmp_path / "gone" / "ws"
    run = push_run(ws, store, CountingOutbox())
    run.run(max_steps=3)
    run.close()
    shutil.rmtree(tmp_path / "gone")
    rows = [s.checkpoint for s in store.steps("R1", start=0)]
    resumed = Run.resume(store, "R1", effects=CountingOutbox())
    assert resumed.state is RunState.BLOCKED and resumed.resume_report is not None
    workspace = next(c for c in resumed.resume_report.checks if c.name == "workspace")
    assert not workspace.ok and workspace.detail == f"{ws} is missing"
    assert not (tmp_path / "gone").exists()  # the refused resume made no directory
    assert [s.checkpoint for s in store.steps("R1", start=0)] == rows
    resumed.close()


@pytest.mark.parametrize(("checkpoint_id", "new_id", "error", "message"), [
    ("R1@99", None, StoreError, "run 'R1' has no step 99"),
    ("NOPE@2", None, StoreError, "unknown run id 'NOPE'"),
    ("snap-9999", None, RunStateError, "'snap-9999' is neither a checkpoint"),
    ("R1@3", "R1", StoreError, "run id 'R1' exists already"),
])
def test_a_refused_fork_leaves_no_workspace_and_no_rows(tmp_path: Path, checkpoint_id: str, new_id: str | None,
                                                        error: type[Exception], message: str) -> None:
    store = SQLiteStore(tmp_path / "runs.sqlite")
    run = push_run(tmp_path / "ws", store, CountingOutbox())
    run.run(max_steps=3)
    ids = store.run_ids()
    with pytest.raises(error, match=re.escape(message)) as caught:
        run.fork(checkpoint_id, new_run_id=new_id, workspace=tmp_path / "new" / "fork")
    assert "\n" not in str(caught.value)
    assert not (tmp_path / "new").exists()
    (tmp_path / "empty").mkdir()
    with pytest.raises(error, match=re.escape(message)):
        run.fork(checkpoint_id, new_run_id=new_id, workspace=tmp_path / "empty")
    assert list((tmp_path / "empty").iterdir()) == []  # an empty folder given stays empty
    assert store.run_ids() == ids


def test_a_fork_from_a_checkpoint_taken_under_another_contract_is_refused(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.sqlite")
    a = push_run(tmp_path / "a", store, CountingOutbox(), run_id="A", max_decisions=12)
    b = push_run(tmp_path / "b", store, CountingOutbox(), run_id="B", max_decisions=3)
    assert a.contract.version != b.contract.version
    with pytest.raises(RunStateError, match=re.escape(
            f"checkpoint B@0 was taken under contract {b.contract.version[:12]}; run A's is "
            f"{a.contract.version[:12]}")):
        a.fork("B@0", workspace=tmp_path / "fork")  # both workspaces are empty: the files would match
    assert not (tmp_path / "fork").exists() and store.run_ids() == ["A", "B"]
    fork = b.fork("B@0", workspace=tmp_path / "fork")  # its own run's contract: fine
    assert fork.contract.budget.max_decisions == 3


@pytest.mark.parametrize("approver", [AutoApprove(), AskHuman()])
def test_the_watchdog_does_not_call_a_finished_or_waiting_run_stuck(tmp_path: Path, approver: Approver) -> None:
    store = SQLiteStore(tmp_path / "runs.sqlite")
    run = push_run(tmp_path / "ws", store, CountingOutbox())
    run.approver = approver
    with HeartbeatThread(store, run, interval_s=3600):
        while not run.state.terminal and run.waiting is None:
            run.step()
    beat = store.last_beat("R1")
    assert beat is not None and beat.step == run.step_no  # the last beat says where the run stopped
    verdict = Watchdog(store, timeout_s=90).check("R1", now=time.time() + 1000)
    assert verdict.status == "settled"
    assert verdict.reason.startswith(f"{run.state.value} at step {run.step_no}")
    assert store.run_info("R1").status == "active"


@pytest.mark.parametrize("where", ["ws", "."])
def test_resume_with_the_workspace_replaced_by_a_file_is_one_line(tmp_path: Path, where: str) -> None:
    store = SQLiteStore(tmp_path / "runs.sqlite")
    ws = tmp_path / "box" / "ws"
    run = push_run(ws, store, CountingOutbox())
    run.run(max_steps=2)
    run.close()
    shutil.rmtree(tmp_path / "box")
    blocker = tmp_path / "box" / "ws" if where == "ws" else tmp_path / "box"
    blocker.parent.mkdir(exist_ok=True)
    blocker.write_text("not a folder")
    with pytest.raises(WorkspaceError, match=re.escape(f"run 'R1': its workspace {ws} cannot be used: {blocker} "
                                                       "is not a directory")):
        Run.resume(store, "R1", effects=CountingOutbox())
    assert blocker.read_text() == "not a folder"


@pytest.mark.parametrize("run_id", ["", "  ", "a\nb", "R1@3\n", "nul\x00", "tab\there"])
def test_a_run_id_that_cannot_name_a_checkpoint_on_one_line_is_refused(tmp_path: Path, run_id: str) -> None:
    store = SQLiteStore(tmp_path / "runs.sqlite")
    with pytest.raises(StoreError, match=re.escape(f"run id {run_id!r}:")) as caught:
        push_run(tmp_path / "ws", store, CountingOutbox(), run_id=run_id)
    assert "\n" not in str(caught.value) and store.run_ids() == []


@pytest.mark.parametrize("run_id", ["x@5", "é/../ü", "'; DROP TABLE runs; --"])
def test_odd_but_printable_run_ids_resume_and_fork(tmp_path: Path, run_id: str) -> None:
    store = SQLiteStore(tmp_path / "runs.sqlite")
    run = push_run(tmp_path / "ws", store, CountingOutbox(), run_id=run_id)
    run.run(max_steps=2)
    assert Run.resume(store, run_id, effects=CountingOutbox()).resume_report.ok  # type: ignore[union-attr]
    fork = run.fork(f"{run_id}@2", workspace=tmp_path / "fork")
    assert fork.run_id == f"{run_id}-fork1" and fork.step_no == 2


def test_a_checkpoint_id_with_a_newline_in_its_run_id_still_parses() -> None:
    # Stores written before run ids were checked may hold one; the step is the digits after the last '@'.
    match = _CHECKPOINT_ID.match("a\nb@3")
    assert match is not None and match["run"] == "a\nb" and match["step"] == "3"
    assert _CHECKPOINT_ID.match("R1@3\n") is None


_BEATER = """
import os, sys, time
from harness_lab.store import Heartbeat, SQLiteStore
store = SQLiteStore(sys.argv[1], create=False)
store.beat(Heartbeat("R1", time.time(), 3, time.time(), os.getpid(), "RUNNING at step 3"))
print("beat", flush=True)
sys.stdin.read()
"""


def test_resume_is_refused_while_another_live_process_drives_the_run(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.sqlite")
    run = push_run(tmp_path / "ws", store, CountingOutbox())
    run.run(max_steps=3)
    rows = [s.checkpoint for s in store.steps("R1", start=0)]
    child = subprocess.Popen([sys.executable, "-c", _BEATER, str(tmp_path / "runs.sqlite")], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        assert child.stdout is not None and child.stdout.readline() == b"beat\n"
        with pytest.raises(RunStateError, match=rf"run 'R1' is being driven by process {child.pid} \(it beat \d+s "
                                                r"ago: RUNNING at step 3\); stop that process first"):
            Run.resume(store, "R1", effects=CountingOutbox())
        verdict = Watchdog(store).check("R1")
        assert verdict.status == "alive"
    finally:
        child.communicate(b"")
    assert [s.checkpoint for s in store.steps("R1", start=0)] == rows
    # The process is gone: its fresh beat no longer holds the run, and the watchdog says so.
    verdict = Watchdog(store).check("R1")
    assert verdict.status == "stuck" and f"process {child.pid} that beat" in verdict.reason
    resumed = Run.resume(store, "R1", effects=CountingOutbox())
    assert resumed.resume_report is not None and resumed.resume_report.ok


def test_the_sigterm_progress_report_names_a_resume_command_that_works(tmp_path: Path) -> None:
    db = tmp_path / "my runs.sqlite"
    store = SQLiteStore(db)
    run = push_run(tmp_path / "ws", store, CountingOutbox(), run_id="R 1")
    stopped = drive(run, store, lambda record: os.kill(os.getpid(), signal.SIGTERM), heartbeat_s=3600, grace_s=3600)
    assert stopped and run.step_no == 1
    (report,) = store.reports("R 1")
    assert f"`harness-lab resume --db {shlex.quote(str(db))} --run-id 'R 1'`" in report
    args = shlex.split(report.split("resume with `")[1].split("`")[0])
    assert args[args.index("--db") + 1] == str(db) and args[args.index("--run-id") + 1] == "R 1"


def test_a_resumed_run_is_no_longer_marked_stuck_or_stopped(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.sqlite")
    run = push_run(tmp_path / "ws", store, CountingOutbox())
    run.run(max_steps=3)
    store.set_status("R1", "stuck", "no heartbeat for 120.0s")
    refused_ws = tmp_path / "ws" / "stray.txt"
    refused_ws.write_text("an outside edit")
    refused = Run.resume(store, "R1", effects=CountingOutbox())
    assert refused.state is RunState.BLOCKED and store.run_info("R1").status == "stuck"  # refused: store as it was
    refused_ws.unlink()
    Run.resume(store, "R1", effects=CountingOutbox())
    info = store.run_info("R1")
    assert (info.status, info.status_reason) == ("active", "resumed from checkpoint R1@3")


def test_the_watchdog_names_an_unknown_run_id(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.sqlite")
    push_run(tmp_path / "ws", store, CountingOutbox())
    with pytest.raises(StoreError, match=re.escape("unknown run id 'R2'; known: R1")):
        Watchdog(store).check("R2")


def test_the_external_loop_takes_a_resumed_run_that_is_waiting_or_finished(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.sqlite")
    outbox = CountingOutbox()
    run = push_run(tmp_path / "ws", store, outbox)
    run.approver = AskHuman()
    while run.waiting is None:
        run.step()
    resumed = Run.resume(store, "R1", effects=outbox)  # parked at the push's gate
    loop = ExternalLoop(resumed)
    assert loop.run_until_settled() is LoopState.WAITING_FOR_HUMAN
    assert loop.rounds[-1].outcome is RoundOutcome.HUMAN_GATE and loop.rounds[-1].steps == ()
    loop.approve()
    assert loop.run_until_settled() is LoopState.COMPLETED and outbox.applied == ["R1:gate:4:" + outbox.applied[0][10:]]
    finished = ExternalLoop(Run.resume(store, "R1", effects=outbox))
    assert finished.run_until_settled() is LoopState.COMPLETED and finished.final_evidence is not None


@pytest.mark.parametrize(("kwargs", "message"), [({"max_rounds": 0}, "max_rounds: must be >= 1, got 0"),
                                                 ({"steps_per_round": -1}, "steps_per_round: must be >= 1, got -1")])
def test_the_external_loop_refuses_a_round_budget_below_one(tmp_path: Path, kwargs: dict[str, int], message: str) -> None:
    run = push_run(tmp_path / "ws", None, CountingOutbox())
    with pytest.raises(ValueError, match=re.escape(message)):
        ExternalLoop(run, **kwargs)


def test_an_infinite_heartbeat_interval_or_grace_window_means_never_not_a_thread_traceback(tmp_path: Path) -> None:
    # Tests run with warnings as errors: an exception in the heartbeat or timer thread fails this test.
    store = SQLiteStore(tmp_path / "runs.sqlite")
    run = push_run(tmp_path / "ws", store, CountingOutbox())
    stopped = drive(run, store, lambda record: os.kill(os.getpid(), signal.SIGTERM) if record.step == 2 else None,
                    heartbeat_s=float("inf"), grace_s=float("inf"))
    assert stopped and run.step_no == 2
    beat = store.last_beat("R1")
    assert beat is not None and beat.step == 2
    for bad in (float("nan"), 0.0, -1.0):
        with pytest.raises(ValueError, match="must be > 0"):
            HeartbeatThread(store, run, bad)
        with pytest.raises(ValueError, match="must be > 0"):
            Watchdog(store, bad)
    with pytest.raises(ValueError, match=re.escape("window_s: must be >= 0 seconds, got nan")):
        GracefulStop(float("nan"))


def test_a_fork_of_a_fork_a_hundred_generations_deep_resumes_and_forks(tmp_path: Path) -> None:
    # Each fork taken at once: its first row names its source's checkpoint, a chain 100 rows long.
    store = InMemoryStore()
    run = push_run(tmp_path / "ws", store, CountingOutbox())
    run.run(max_steps=2)
    current = run
    for generation in range(100):
        fork = current.fork(f"{current.run_id}@2", new_run_id=f"F{generation}", workspace=tmp_path / f"f{generation}")
        if current is not run:
            current.close()
        current = fork
    resumed = Run.resume(store, "F99", effects=CountingOutbox())
    assert resumed.resume_report is not None and resumed.resume_report.ok
    assert load_checkpoint(store, "F99")[1] == load_checkpoint(store, "R1", 2)[1] is not None


def test_a_run_whose_first_row_fails_is_not_left_registered(tmp_path: Path) -> None:
    # create_run and the step-0 row were two transactions: a kill between them left the id registered
    # with no row, so 'run' said it existed and 'resume' found no step: the id was stuck for good.
    import sqlite3

    from harness_lab.errors import StoreError

    db = tmp_path / "runs.sqlite"
    SQLiteStore(db).close()
    conn = sqlite3.connect(db)  # the step row's INSERT fails inside the registering transaction
    conn.execute("CREATE TRIGGER no_rows BEFORE INSERT ON steps BEGIN SELECT RAISE(ABORT, 'disk gone'); END")
    conn.commit()
    store = SQLiteStore(db)
    with pytest.raises(StoreError) as info:
        Run.from_scenario("conforming_report", workspace=tmp_path / "ws", store=store)
    assert not store.has_run("conforming_report") and store.run_ids() == []
    assert "disk gone" in str(info.value)  # the database's own reason, not a misread "exists already"
    conn.execute("DROP TRIGGER no_rows")
    conn.commit()
    conn.close()
    run = Run.from_scenario("conforming_report", workspace=tmp_path / "ws2", store=store)  # the id is free
    assert run.run() is RunState.REVIEW_READY and store.has_run("conforming_report")
    with pytest.raises(StoreError, match="exists already"):
        Run.from_scenario("conforming_report", workspace=tmp_path / "ws3", store=store)
