"""kill -9 and resume: the reopened run shows every step of both processes, and ``at(n)`` of the resumed
(live) run and of ``Run.open`` agree for every n; the files of a step written before the kill survive it."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from harness_lab.loop.run import Run
from harness_lab.records.states import RunState
from harness_lab.store import SQLiteStore
from tests.persistence.persisthelpers import kill_when

CHILD = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from harness_lab.loop.run import Run
    from harness_lab.store import SQLiteStore
    db, ws, marker = sys.argv[1:4]
    run = Run.from_scenario("missing_limitations", store=SQLiteStore(db), workspace=ws)
    run.run(max_steps=4)
    Path(marker).write_text("4 steps committed")
    time.sleep(600)  # killed here, between steps: nothing closed, nothing tidied
""")


def test_after_kill_9_and_resume_the_reopened_run_shows_every_step_of_both_processes(tmp_path: Path) -> None:
    db, ws, marker = tmp_path / "runs.sqlite", tmp_path / "ws", tmp_path / "marker"
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(db), str(ws), str(marker)], text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    kill_when(marker, child)
    store = SQLiteStore(db, create=False)
    run = Run.resume(store, "missing_limitations")
    assert run.step_no == 4 and run.run() is RunState.EXHAUSTED
    opened = Run.open(db, "missing_limitations")
    points = opened.history
    assert [p.step for p in points] == list(range(run.step_no + 1)) == [p.step for p in run.history]
    for n in range(run.step_no + 1):
        live, reopened = run.at(n), opened.at(n)
        assert reopened.context == live.context and reopened.decision == live.decision
        assert reopened.files == live.files and reopened.point == live.point
    assert opened.at(3).file_text("report.md") == (ws / "report.md").read_text()
    # the first step after the resume saw the resume note, as the proposer did
    assert opened.at(5).context is not None and "Resumed from checkpoint missing_limitations@4" in opened.at(5).context.render()
    opened.close()
    run.close()
    store.close()
