"""`harness-lab watch`: a run killed with SIGKILL is found stuck and resumed to the uninterrupted end;
--exec hears of it; a clean store is watched without a byte written; the restart budget gives up."""

from __future__ import annotations

import hashlib
import json
import os
import re
import select
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from persisthelpers import kill_when

from harness_lab.persistence.checkpoint_record import Checkpoint
from harness_lab.persistence.heartbeat import Watchdog, process_alive
from harness_lab.persistence.watch import RESTART_HEADER, Watcher
from harness_lab.store import Heartbeat, SQLiteStore

_ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
_CLI = [sys.executable, "-m", "harness_lab.cli"]
_REPORT = ("# Report\n\n## Conclusion\nChecks keep drafts out of review [E:harness-boundary] "
           "[E:acceptance-snapshot].\n\n## Evidence\n- The runtime decides [E:harness-boundary].\n"
           "- Receipts bind bytes [E:acceptance-snapshot].\n\n## Limitations\nTest material only.\n")


@pytest.fixture
def signals() -> Iterator[Path]:
    """A folder the command can reach: it runs as a uid of its own, and pytest's folders are the test user's only."""
    folder = Path(tempfile.mkdtemp(prefix="harness-lab-watch-"))
    folder.chmod(0o777)
    yield folder
    shutil.rmtree(folder)


def _scenario(tmp: Path, signals: Path) -> Path:
    """read, read, a command that says it started and waits for the gate file, the report, finish."""
    wait = (f"touch {signals / 'started'}; while [ ! -e {signals / 'gate'} ]; do sleep 0.02; done; "
            "echo passed the gate")
    actions = [{"kind": "read_evidence", "id": "harness-boundary"}, {"kind": "read_evidence", "id": "acceptance-snapshot"},
               {"kind": "run_command", "argv": ["sh", "-c", wait], "timeout": 600},
               {"kind": "write_report", "text": _REPORT}, {"kind": "finish"}]
    path = tmp / "gated.yaml"
    path.write_text(yaml.safe_dump({"id": "gated", "title": "a command waits for a gate file", "contract": "report_task",
                                    "labels": {"acceptable_reports": [], "note": ""}, "actions": actions}))
    return path


def _cli(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([*_CLI, *args], env=_ENV, capture_output=True, text=True, timeout=300)
    assert not check or done.returncode == 0, done
    return done


def _end(db: Path, run_id: str) -> dict[str, Any]:
    """Where a run ended, and its side-effect ledger: what a recovered run must share with an uninterrupted one."""
    store = SQLiteStore(db, read_only=True)
    try:
        row = store.last_step(run_id)
        assert row is not None
        last = Checkpoint.from_row(row)
        ledger = [(e.step, e.tool, e.status) for e in store.effects(run_id)]
        keys = [e.key for e in store.effects(run_id)]
    finally:
        store.close()
    assert len(keys) == len(set(keys))  # one entry per effect: none applied twice
    return {"state": last.state.value, "step": last.step, "workspace": last.workspace_hash,
            "artifacts": last.artifact_sha256, "ledger": ledger}


def _kill_mid_command(signals: Path, scenario: Path, db: Path) -> None:
    """`harness-lab run --db` until its command runs (the started file: an event, polled), then SIGKILL."""
    run = subprocess.Popen([*_CLI, "run", str(scenario), "--db", str(db), "--isolation", "none"], env=_ENV,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    kill_when(signals / "started", run)
    (signals / "started").unlink()


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("reference")
    open_to_all = Path(tempfile.mkdtemp(prefix="harness-lab-watch-"))
    open_to_all.chmod(0o777)
    (open_to_all / "gate").touch()
    _cli("run", str(_scenario(tmp, open_to_all)), "--db", str(tmp / "ref.sqlite"), "--isolation", "none")
    yield _end(tmp / "ref.sqlite", "gated")
    shutil.rmtree(open_to_all)


def test_a_killed_run_is_found_stuck_and_resumed_to_the_uninterrupted_end(tmp_path: Path, signals: Path,
                                                                           uninterrupted: dict[str, Any]) -> None:
    db = tmp_path / "runs.sqlite"
    _kill_mid_command(signals, _scenario(tmp_path, signals), db)
    (signals / "gate").touch()  # the resumed command passes at once
    watched = _cli("watch", "--db", str(db), "--once", "--resume", check=False)
    assert watched.returncode == 1, watched  # something was stuck
    first, ended = watched.stdout.splitlines()
    assert re.fullmatch(r"gated: stuck: process \d+ that beat \S+s ago is gone; last: .* -> resuming \(restart 1/3, "
                        r"pid \d+\)", first), first
    assert ended == "gated: resume exited 0: final: REVIEW_READY (checks_passed)", watched.stdout
    assert _end(db, "gated") == uninterrupted
    assert uninterrupted["state"] == "REVIEW_READY" and ("run_command" in str(uninterrupted["ledger"]))
    store = SQLiteStore(db, read_only=True)
    assert store.run_info("gated").status == "active"  # the resume cleared the stuck mark
    assert [r.split(":")[0] for r in store.reports("gated")] == [f"{RESTART_HEADER}1/3"]
    store.close()
    again = _cli("watch", "--db", str(db), "--once", "--resume")  # ended: settled, nothing to do
    assert again.stdout.startswith("gated: settled: REVIEW_READY at step 5"), again.stdout


def test_exec_hears_of_the_stuck_run_through_its_environment(tmp_path: Path, signals: Path) -> None:
    db = tmp_path / "runs.sqlite"
    _kill_mid_command(signals, _scenario(tmp_path, signals), db)
    heard = tmp_path / "heard"
    # The command is the user's; the run id and the reason reach it only through the environment.
    alert = f'printf "%s|%s|%s" "$HARNESS_LAB_RUN_ID" "$HARNESS_LAB_WATCH_STATUS" "$HARNESS_LAB_DB" > {heard}'
    watched = _cli("watch", "--db", str(db), "--once", "--exec", alert, check=False)
    assert watched.returncode == 1, watched
    assert heard.read_text() == f"gated|stuck|{db}"
    assert watched.stdout.rstrip().endswith("-> alert exited 0")
    store = SQLiteStore(db, read_only=True)
    assert store.run_info("gated").status == "stuck"  # marked, and not resumed
    assert store.reports("gated") == []
    store.close()


def test_a_watch_finding_nothing_stuck_exits_0_and_writes_nothing(tmp_path: Path, signals: Path) -> None:
    scenario = _scenario(tmp_path, signals)
    (signals / "gate").touch()
    db = tmp_path / "runs.sqlite"
    _cli("run", str(scenario), "--db", str(db), "--isolation", "none")
    before = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in tmp_path.iterdir() if p.is_file()}
    watched = _cli("watch", "--db", str(db), "--once", "--resume", "--exec", f"touch {tmp_path / 'alerted'}")
    assert watched.stdout == "gated: settled: REVIEW_READY at step 5: the run has ended; nothing should beat\n"
    after = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in tmp_path.iterdir() if p.is_file()}
    assert after == before  # no byte of the store written, no side file left, no alert run


def test_the_restart_budget_gives_up_and_says_so(tmp_path: Path, signals: Path) -> None:
    db = tmp_path / "runs.sqlite"
    _kill_mid_command(signals, _scenario(tmp_path, signals), db)
    store = SQLiteStore(db, create=False)
    store.add_report("gated", time.time(), f"{RESTART_HEADER}1/1: gated\n")  # one restart spent already
    store.close()
    watched = _cli("watch", "--db", str(db), "--once", "--resume", "--max-restarts", "1", check=False)
    assert watched.returncode == 1
    assert watched.stdout.startswith("gated: given_up: process ") and "restart budget of 1 spent" in watched.stdout
    store = SQLiteStore(db, read_only=True)
    info = store.run_info("gated")
    assert info.status == "stuck" and info.status_reason.startswith("given up after 1 restart(s): process ")
    assert len(store.reports("gated")) == 1  # not resumed again
    store.close()


def test_judge_writes_nothing_and_check_marks(tmp_path: Path, signals: Path) -> None:
    db = tmp_path / "runs.sqlite"
    _kill_mid_command(signals, _scenario(tmp_path, signals), db)
    store = SQLiteStore(db, create=False)
    verdict = Watchdog(store).judge("gated")
    assert verdict.status == "stuck" and store.run_info("gated").status == "active"
    assert Watchdog(store).check("gated") == verdict and store.run_info("gated").status == "stuck"
    store.close()


@pytest.mark.parametrize(("args", "message"), [
    (["--interval", "0"], "--interval: must be > 0 seconds, got 0.0"),
    (["--timeout", "-1"], "--timeout: must be > 0 seconds, got -1.0"),
    (["--max-restarts", "-1"], "--max-restarts: must be >= 0, got -1"),
])
def test_bad_watch_arguments_are_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    done = _cli("watch", "--db", str(tmp_path / "x.sqlite"), "--once", *args, check=False)
    assert (done.returncode, done.stderr) == (2, f"harness-lab: error: {message}\n")
    assert not (tmp_path / "x.sqlite").exists()


def test_a_missing_or_foreign_store_is_one_line(tmp_path: Path) -> None:
    done = _cli("watch", "--db", str(tmp_path / "none.sqlite"), "--once", check=False)
    assert (done.returncode, done.stderr) == (2, f"harness-lab: error: {tmp_path / 'none.sqlite'}: no such store file\n")
    assert not (tmp_path / "none.sqlite").exists()
    (tmp_path / "text.sqlite").write_text("not a database\n")
    done = _cli("watch", "--db", str(tmp_path / "text.sqlite"), "--once", check=False)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "not a usable" in done.stderr
    assert (tmp_path / "text.sqlite").read_text() == "not a database\n"
    done = _cli("watch", "--db", str(tmp_path), "--once", check=False)
    assert (done.returncode, done.stderr) == (2, f"harness-lab: error: {tmp_path}: a directory, not a store file\n")


def test_store_text_is_escaped_and_a_forged_id_never_resumed(tmp_path: Path, signals: Path) -> None:
    db = tmp_path / "runs.sqlite"
    _kill_mid_command(signals, _scenario(tmp_path, signals), db)
    with sqlite3.connect(db) as edit:  # an edited store: a newline in a run id would forge a line
        for table in ("runs", "heartbeats", "steps", "effects"):
            edit.execute(f"UPDATE {table} SET run_id = ? WHERE run_id = 'gated'", ("gated\nx: alive",))
    edit.close()
    watched = _cli("watch", "--db", str(db), "--once", "--resume", check=False)
    lines = watched.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gated\\nx: alive: "), watched.stdout
    assert json.dumps("not resumed: the id holds a control character")[1:-1] in lines[0]


def test_looping_it_resumes_what_it_finds_prints_changes_only_and_stops_on_ctrl_c(tmp_path: Path,
                                                                                   signals: Path) -> None:
    db = tmp_path / "runs.sqlite"
    _kill_mid_command(signals, _scenario(tmp_path, signals), db)
    (signals / "gate").touch()
    watcher = subprocess.Popen([*_CLI, "watch", "--db", str(db), "--interval", "0.05", "--resume"], env=_ENV,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    settled = "gated: settled: REVIEW_READY at step 5: the run has ended; nothing should beat"
    seen: list[str] = []
    try:
        # Read what the watcher prints until it reports the run settled (an event, not a deadline: under load
        # the pass that sees the end comes when it comes); 300 s only guards against a hang.
        assert watcher.stdout is not None
        deadline = time.monotonic() + 300
        exited = "gated: resume exited 0: final: REVIEW_READY (checks_passed)"
        # the two come in either order: the run's last checkpoint and its process's exit race
        while not {settled, exited} <= set(seen) and watcher.poll() is None and time.monotonic() < deadline:
            if select.select([watcher.stdout], [], [], 1.0)[0]:
                seen.append(watcher.stdout.readline().rstrip("\n"))
        assert {settled, exited} <= set(seen), seen
        time.sleep(0.2)  # a few more passes: a settled run is not printed again
        watcher.send_signal(signal.SIGINT)
        rest, err = watcher.communicate(timeout=60)
        out = "\n".join(seen) + "\n" + rest
    finally:
        if watcher.poll() is None:
            watcher.kill()
            watcher.communicate()
    assert (watcher.returncode, err) == (130, "harness-lab: interrupted\n")
    lines = out.splitlines()
    assert lines[0].startswith("gated: stuck: process ") and "-> resuming (restart 1/3" in lines[0], out
    # After it (as the passes fell): the resume still starting, the run alive, the child's exit, the run settled;
    # each at most once, the last two surely, and nothing printed after the run settled and its child exited.
    later = {"a resume started by this watcher is still starting", "alive: RUNNING", "resume exited 0: final: "
             "REVIEW_READY (checks_passed)", "settled: REVIEW_READY at step 5: the run has ended; nothing should beat"}
    assert all(sum(m in line for line in lines[1:]) <= 1 for m in later) and len(lines) <= 5, out
    assert all(any(m in line for m in later) for line in lines[1:]), out
    assert {settled, exited} == set(lines[-2:]), out


def _silent_run(db: Path, run_id: str, spec: dict[str, Any]) -> None:
    """A registered run whose last beat came from a process that is gone (reaped): stuck at once."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    store = SQLiteStore(db)
    store.create_run(run_id, spec, time.time())
    store.beat(Heartbeat(run_id, time.time(), 2, time.time(), gone.pid, "RUNNING at step 2"))
    store.close()


class _FakeChild:
    pid, returncode = 4242, 0

    def __init__(self, argv: list[str], **kwargs: object) -> None:
        _FakeChild.argv = argv

    def poll(self) -> int:
        return 0

    def wait(self, timeout: float | None = None) -> int:
        return 0


def test_a_model_driven_run_is_resumed_with_model_and_its_id_as_one_argv_item(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "runs.sqlite"
    _silent_run(db, "r; touch pwned", {"proposer": {"kind": "OpenAICompatProposer"}})
    monkeypatch.setattr(subprocess, "Popen", _FakeChild)
    watcher = Watcher(db, resume=True)
    (line,) = watcher.scan()
    assert (line.status, line.action) == ("stuck", "resuming (restart 1/3, pid 4242)")
    assert watcher.reap() == ["r; touch pwned: resume exited 0: no output"]
    assert _FakeChild.argv == [sys.executable, "-m", "harness_lab.cli", "resume", "--db", str(db), "--run-id",
                               "r; touch pwned", "--heartbeat", "30.0", "--model"]


def test_an_alert_that_hangs_is_killed_with_what_it_started(tmp_path: Path) -> None:
    db = tmp_path / "runs.sqlite"
    _silent_run(db, "R", {})
    pid_file = tmp_path / "sleeper"
    watcher = Watcher(db, alert=f"sleep 600 & echo $! > {pid_file}; wait", alert_timeout_s=0.5)
    (line,) = watcher.scan()
    assert (line.status, line.action) == ("stuck", "alert killed after 0.5s")
    sleeper = int(pid_file.read_text())
    for _ in range(3000):  # its new parent reaps it: an event, polled
        if not process_alive(sleeper):
            break
        time.sleep(0.01)
    assert not process_alive(sleeper)
    (again,) = watcher.scan()  # still stuck: one alert per run and watcher, not one per pass
    assert (again.status, again.action) == ("stuck", "")


def test_two_watchers_at_once_resume_the_run_once(tmp_path: Path, signals: Path,
                                                  uninterrupted: dict[str, Any]) -> None:
    db = tmp_path / "runs.sqlite"
    _kill_mid_command(signals, _scenario(tmp_path, signals), db)
    (signals / "gate").touch()
    both = [subprocess.Popen([*_CLI, "watch", "--db", str(db), "--once", "--resume"], env=_ENV,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=300)[0] for p in both]
    exits = [line.split(": ", 1)[1] for out in outs for line in out.splitlines() if ": resume exited " in line]
    # However the two passes fell, the run was driven to its end once: a second child either found it ended
    # (nothing to do) or was refused by the lease or the live driver's beat, with nothing written.
    assert 1 <= len(exits) <= 2, outs
    assert all(e == "resume exited 0: final: REVIEW_READY (checks_passed)"
               or e.startswith("resume exited 2: harness-lab: error: run 'gated' is ") for e in exits), outs
    assert _end(db, "gated") == uninterrupted  # and one ledger entry per effect (in _end)


def test_a_stuck_run_is_marked_once_not_at_every_pass(tmp_path: Path) -> None:
    db = tmp_path / "runs.sqlite"
    _silent_run(db, "R", {})
    watcher, now = Watcher(db), time.time()
    assert [line.status for line in watcher.scan(now + 5)] == ["stuck"]
    store = SQLiteStore(db, read_only=True)
    marked = store.run_info("R")
    store.close()
    assert marked.status == "stuck" and "beat 5.0s ago is gone" in marked.status_reason
    before = db.read_bytes()
    assert [line.status for line in watcher.scan(now + 10)] == ["stuck"]  # its reason now says 10.0s ago
    assert db.read_bytes() == before
