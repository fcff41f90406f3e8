"""What a kill -9 leaves: a run_command in flight ends effect_uncertain on resume; snapshot folders do not pile up."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from persisthelpers import CountingOutbox, kill_when, outcome, push_run

from harness_lab import Run, RunState
from harness_lab.errors import SimulatedCrash
from harness_lab.faults import CrashPoint, ProcessCrash
from harness_lab.store import SQLiteStore

_ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}

# A checkpointed run whose second step is a command that writes started.txt and then sleeps; argv[3]:
# its temporary folder (snapshots). It is killed while the command runs.
_CHILD = """
import sys, tempfile
from pathlib import Path
sys.path.insert(0, sys.argv[4])
tempfile.tempdir = sys.argv[3]
from persisthelpers import CountingOutbox, outcome, push_run
from harness_lab.store import SQLiteStore
actions = [{"kind": "read_evidence", "id": "harness-boundary"},
           {"kind": "run_command", "argv": ["sh", "-c", "echo x > started.txt; exec sleep 300"], "timeout": 600},
           {"kind": "finish"}]
push_run(Path(sys.argv[2]), SQLiteStore(sys.argv[1]), CountingOutbox(), actions=actions).run()
"""


def _kill_mid_command(db: Path, ws: Path, tmp: Path) -> None:
    """Start the child, SIGKILL it once its command has written started.txt (an event, polled)."""
    child = subprocess.Popen([sys.executable, "-c", _CHILD, str(db), str(ws), str(tmp), str(Path(__file__).parent)],
                             env=_ENV, stderr=subprocess.PIPE, text=True)
    kill_when(ws / "started.txt", child)


def test_a_command_killed_mid_flight_ends_effect_uncertain_on_resume(tmp_path: Path) -> None:
    db, ws = tmp_path / "runs.sqlite", tmp_path / "ws"
    (tmp_path / "tmp").mkdir()
    _kill_mid_command(db, ws, tmp_path / "tmp")
    store = SQLiteStore(db, create=False)
    assert [(e.tool, e.status) for e in store.effects("R1")] == [("run_command", "intent")]
    run = Run.resume(store, "R1", effects=CountingOutbox())
    assert run.resume_report is not None and run.resume_report.ok, run.resume_report.summary()
    workspace = next(c for c in run.resume_report.checks if c.name == "workspace")
    assert workspace.detail == ("changed since step 1, maybe by the run_command in flight at step 2 (its outcome is "
                                "unknown: the run ends effect_uncertain, nothing overwritten)")
    assert run.state is RunState.BLOCKED and run.stop_reason is not None
    assert run.stop_reason.code == "effect_uncertain"
    assert run.stop_reason.message.startswith("run_command (idempotency key R1:2) was in flight when the process died")
    assert [(e.tool, e.status) for e in store.effects("R1")] == [("run_command", "uncertain")]
    assert (ws / "started.txt").read_text() == "x\n"  # nothing overwritten, the command not run again
    run.close()
    store.close()


def test_snapshot_folders_of_killed_runs_are_removed_by_the_next_run(tmp_path: Path, own_tmp: Path) -> None:
    for i in range(3):
        _kill_mid_command(tmp_path / f"runs{i}.sqlite", tmp_path / f"ws{i}", own_tmp)
    # (each killed run's successor swept the folder before it; the last one's is still there)
    assert [p.name.split("-")[3] for p in own_tmp.glob("harness-lab-snapshots-*")] != []
    run = push_run(tmp_path / "ws", SQLiteStore(tmp_path / "next.sqlite"), CountingOutbox())
    assert list(own_tmp.glob("harness-lab-snapshots-*")) == []  # swept; this run's own is made when first needed
    run.snapshot("now")
    (left,) = own_tmp.glob("harness-lab-snapshots-*")
    assert left.name.startswith(f"harness-lab-snapshots-{os.getpid()}-")  # this run's own
    run.close()
    assert list(own_tmp.glob("harness-lab-snapshots-*")) == []


def test_a_resume_killed_after_settling_an_effect_in_flight_is_resumed_again(tmp_path: Path) -> None:
    # bench/stress_kill.py met it: killed mid-write, then the resume that settled the write (resolved) killed
    # before the step that redoes it committed; the next resume must see that write in flight still.
    reference = push_run(tmp_path / "ref", None, CountingOutbox())
    reference.run()
    store = SQLiteStore(tmp_path / "runs.sqlite")
    run = push_run(tmp_path / "ws", store, CountingOutbox())
    run.inject(ProcessCrash(point=CrashPoint.AFTER_EFFECT), at_step=3)
    with pytest.raises(SimulatedCrash):
        run.run()
    (tmp_path / "ws" / "notes" / "plan.txt").unlink()  # the kill came before the rename; its folder is made
    first = Run.resume(store, "R1", effects=CountingOutbox(), approver=run.approver)
    assert first.resume_report is not None and first.resume_report.ok
    assert [e.status for e in store.effects("R1", 3)] == ["resolved"]  # ... and this process dies here
    again = Run.resume(store, "R1", effects=CountingOutbox(), approver=run.approver)
    assert again.resume_report is not None and again.resume_report.ok, again.resume_report.summary()
    assert "changed only by the write_file of notes/plan.txt in flight at step 3" in again.resume_report.checks[1].detail
    again.run()
    assert outcome(again) == outcome(reference)
