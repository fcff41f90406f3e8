"""One writer per run (the run lease), race-free store creation, and nothing written where nothing should be."""

from __future__ import annotations

import os
import signal
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from persisthelpers import PUSH_STEP, CountingOutbox, push_run

from harness_lab import RunState
from harness_lab.errors import RunStateError
from harness_lab.persistence.process_id import host_name, process_identity
from harness_lab.store import SQLiteStore

_ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}

# Waits for "go" on stdin, then opens (or makes) the store and takes the lease of argv[2]; says what it
# got and holds it until stdin closes. argv[3] == "run": registers a run of that id with one step too.
_TAKER = """
import sys
from harness_lab.errors import RunStateError
from harness_lab.store import SQLiteStore
if sys.argv[3] == "run":
    sys.path.insert(0, sys.argv[4])
    from pathlib import Path
    from persisthelpers import CountingOutbox, push_run
sys.stdin.readline()
store = SQLiteStore(sys.argv[1])
try:
    if sys.argv[3] == "run":  # the run takes its lease
        push_run(Path(sys.argv[5]), store, CountingOutbox(), run_id=sys.argv[2]).run(max_steps=1)
    else:
        store.take_lease(sys.argv[2])
except RunStateError as exc:
    print("refused:", exc, flush=True)
else:
    print("took", flush=True)
sys.stdin.read()
store.close()
"""


def _taker(db: Path, run_id: str, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", _TAKER, str(db), run_id, *(extra or ("lease",))],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=_ENV)


def _start_together(*procs: subprocess.Popen[str]) -> list[str]:
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    lines = [p.stdout.readline().strip() for p in procs if p.stdout is not None]
    for p in procs:
        p.communicate("")
        assert p.returncode == 0
    return lines


def test_two_processes_making_one_new_store_both_register_their_runs(tmp_path: Path) -> None:
    here = str(Path(__file__).parent)
    for i in range(20):
        db = tmp_path / f"new{i}.sqlite"
        pair = [_taker(db, run_id, "run", here, str(tmp_path / f"ws{i}{run_id}")) for run_id in ("A", "B")]
        assert _start_together(*pair) == ["took", "took"], f"pair {i}"
        store = SQLiteStore(db, create=False)
        assert store.run_ids() == ["A", "B"]
        store.close()


def test_a_store_made_meanwhile_by_another_process_is_opened_not_made_again(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # The race above, forced: the other writer makes the tables between this one's look (none yet) and its
    # write lock. SQLite's own connection class, with the other writer's turn at the BEGIN IMMEDIATE.
    db, real = tmp_path / "new.sqlite", sqlite3.connect
    turns = ["the other writer"]

    class Interleaved(sqlite3.Connection):
        def execute(self, sql: str, *args: object) -> sqlite3.Cursor:
            if sql == "BEGIN IMMEDIATE" and turns:
                turns.pop()
                other = SQLiteStore(db)
                other.create_run("B", {"made": "meanwhile"}, 0.0)
                other.close()
            return super().execute(sql, *args)

    monkeypatch.setattr(sqlite3, "connect", lambda *a, **k: real(*a, **k, factory=Interleaved))
    store = SQLiteStore(db)
    store.create_run("A", {}, 0.0)
    assert turns == [] and store.run_ids() == ["A", "B"]
    store.close()


def test_of_two_writers_of_one_run_started_together_exactly_one_holds_it(tmp_path: Path) -> None:
    for i in range(20):
        db = tmp_path / f"s{i}.sqlite"
        pair = [_taker(db, "R1"), _taker(db, "R1")]
        lines = _start_together(*pair)
        assert sorted(line.split(":")[0] for line in lines) == ["refused", "took"], f"pair {i}: {lines}"
        holder = pair[lines.index("took")].pid
        (refusal,) = (line for line in lines if line.startswith("refused"))
        assert f"run 'R1' is held by pid {holder} on host {host_name()} since " in refusal
        assert "\n" not in refusal


def test_a_second_resume_of_a_run_parked_at_a_gate_is_refused_and_the_effect_lands_once(tmp_path: Path) -> None:
    db, outbox = tmp_path / "runs.sqlite", tmp_path / "outbox"
    store = SQLiteStore(db)
    run = push_run(tmp_path / "ws", store, CountingOutbox())
    run.approver = _Park()
    run.run()
    assert run.state is RunState.WAITING_FOR_HUMAN and run.step_no == PUSH_STEP  # parked before the push ran
    store.close()
    first = subprocess.Popen([sys.executable, "-c", _RESUMER, str(db), str(outbox), str(Path(__file__).parent)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_ENV)
    try:
        assert first.stdout is not None and first.stdout.readline() == "applied\n"  # holds the run, inside push
        second = subprocess.run([sys.executable, "-c", _RESUMER, str(db), str(outbox), str(Path(__file__).parent)],
                                capture_output=True, text=True, env=_ENV)
    finally:
        (tmp_path / "outbox.go").touch()
        out, err = first.communicate()
    assert first.returncode == 0, err
    assert out.strip().splitlines()[-1] == "REVIEW_READY"
    assert second.returncode == 2 and second.stdout == ""
    assert second.stderr == (f"run 'R1' is held by pid {first.pid} on host {host_name()} since "
                             f"{second.stderr.split(' since ')[1].split(' ')[0]} (another harness-lab process "
                             "writes it); nothing was written: wait for it to end, or stop it first\n")
    assert outbox.read_text().split() != [] and len(outbox.read_text().split()) == 1  # applied exactly once
    store = SQLiteStore(db, create=False)
    assert [e.status for e in store.effects("R1") if e.tool == "push"] == ["committed"]
    assert store._db.execute("SELECT COUNT(*) FROM leases").fetchone()[0] == 0  # released on close
    store.close()


class _Park:
    """An approver that leaves the gate open (a human who has not answered yet)."""

    def decide(self, request: object) -> None:
        return None


# Resumes R1 with AutoApprove and a file outbox; the push writes its key, says "applied" and waits for
# <outbox>.go before it returns, so a second resume comes while this one holds the run mid-effect.
_RESUMER = """
import os, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[3])
from harness_lab import Run
from harness_lab.loop.approval import AutoApprove
from harness_lab.errors import RunStateError
from harness_lab.store import SQLiteStore
from harness_lab.records.tools import ToolResult
class Outbox:
    def apply(self, action, key):
        with open(sys.argv[2], "a") as fh:
            fh.write(key + "\\n")
        print("applied", flush=True)
        while not os.path.exists(sys.argv[2] + ".go"):
            time.sleep(0.01)
        return ToolResult.success(action.kind, "applied", key=key)
store = SQLiteStore(sys.argv[1], create=False)
try:
    run = Run.resume(store, "R1", effects=Outbox(), approver=AutoApprove())
except RunStateError as exc:
    print(exc, file=sys.stderr)
    sys.exit(2)
run.approve(by="test")
run.run()
print(run.state.value)
store.close()
"""


def test_a_lease_left_by_a_killed_process_is_taken_over(tmp_path: Path) -> None:
    db = tmp_path / "runs.sqlite"
    holder = _taker(db, "R1")
    assert _go(holder) == "took"
    os.kill(holder.pid, signal.SIGKILL)
    holder.communicate()
    store = SQLiteStore(db)
    store.take_lease("R1")  # its holder is dead: no refusal
    assert store._db.execute("SELECT pid FROM leases").fetchall() == [(os.getpid(),)]
    store.close()


def _go(proc: subprocess.Popen[str]) -> str:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write("go\n")
    proc.stdin.flush()
    return proc.stdout.readline().strip()


def test_a_lease_names_its_holder_by_start_time_so_a_reused_pid_does_not_hold_it(tmp_path: Path) -> None:
    db = tmp_path / "runs.sqlite"
    store = SQLiteStore(db)
    live = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        rows = {"live": process_identity(live.pid), "reused": "another-boot:1"}
        for run_id, started in rows.items():
            store._db.execute("INSERT INTO leases VALUES (?, ?, ?, ?, 'tok', 0)", (run_id, live.pid, host_name(), started))
        store._db.execute("INSERT INTO leases VALUES ('far', ?, 'elsewhere', '', 'tok', 0)", (live.pid,))
        with pytest.raises(RunStateError, match=rf"run 'live' is held by pid {live.pid} on host {host_name()} since "
                                                "1970-01-01T00:00:00Z"):
            store.take_lease("live")
        with pytest.raises(RunStateError, match=rf"run 'far' is held by pid {live.pid} on host elsewhere"):
            store.take_lease("far")  # another machine's process cannot be judged from here
        store.take_lease("reused")  # the pid lives, but it is another process than the one that took it
    finally:
        live.communicate(b"")
    store.close()
    left = sqlite3.connect(db).execute("SELECT run_id FROM leases ORDER BY run_id").fetchall()
    assert left == [("far",), ("live",)]  # close gave back only its own


def test_resume_of_a_0_byte_file_refuses_and_writes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "empty.db"
    db.touch()
    done = _cli("resume", "--db", str(db), "--run-id", "R1")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == f"harness-lab: error: {db}: an empty file, not a harness-lab store; nothing was written to it\n"
    assert db.stat().st_size == 0 and sorted(p.name for p in tmp_path.iterdir()) == ["empty.db"]


def test_run_with_an_invalid_run_id_makes_no_store_file(tmp_path: Path) -> None:
    db = tmp_path / "new.db"
    done = _cli("run", "conforming_report", "--db", str(db), "--run-id", "a\tb")
    assert done.returncode == 2 and done.stderr.startswith("harness-lab: error: run id 'a\\tb': empty, blank or")
    assert list(tmp_path.iterdir()) == []


def test_a_new_store_and_its_log_files_are_readable_by_their_owner_only(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        store = SQLiteStore(tmp_path / "runs.sqlite")
        push_run(tmp_path / "ws", store, CountingOutbox()).run(max_steps=2)
        modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in tmp_path.glob("runs.sqlite*")}
        store.close()
    finally:
        os.umask(old)
    assert modes == {"runs.sqlite": 0o600, "runs.sqlite-wal": 0o600, "runs.sqlite-shm": 0o600}


def _cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness_lab.cli", *argv], capture_output=True, text=True,
                          env=_ENV, cwd=Path(__file__).parent)


def test_the_cli_refuses_a_run_another_process_holds_in_one_line_and_writes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "runs.sqlite"
    done = _cli("run", "conforming_report", "--db", str(db), "--run-id", "R1", "--gate-policy", "approve")
    assert done.returncode == 0, done.stderr
    store = SQLiteStore(db, create=False)
    rows = [(s.step, s.checkpoint) for s in store.steps("R1", start=0)]
    store.close()
    holder = _taker(db, "R1")
    try:
        assert _go(holder) == "took"
        for argv in (("resume", "--db", str(db), "--run-id", "R1"),
                     ("run", "conforming_report", "--db", str(db), "--run-id", "R1")):
            refused = _cli(*argv)
            assert refused.returncode == 2 and refused.stdout == "", argv
            assert refused.stderr.startswith(f"harness-lab: error: run 'R1' is held by pid {holder.pid} on host "
                                             f"{host_name()} since ") and refused.stderr.count("\n") == 1, argv
    finally:
        holder.communicate("")
    store = SQLiteStore(db, create=False)
    assert [(s.step, s.checkpoint) for s in store.steps("R1", start=0)] == rows and store.reports("R1") == []
    store.close()


def test_a_new_store_is_not_made_through_a_dangling_link(tmp_path: Path) -> None:
    (tmp_path / "runs.sqlite").symlink_to(tmp_path / "elsewhere.sqlite")
    done = _cli("run", "conforming_report", "--db", str(tmp_path / "runs.sqlite"))
    assert (done.returncode, done.stderr) == (2, f"harness-lab: error: {tmp_path / 'runs.sqlite'}: not a regular file\n")
    assert not (tmp_path / "elsewhere.sqlite").exists()
