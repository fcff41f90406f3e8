"""A delete_file in flight at a crash: its outcome is checkable, so the resumed run ends as an uninterrupted one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from persisthelpers import ACTIONS, CountingOutbox, outcome, push_run

from harness_lab import Run, RunState
from harness_lab.errors import SimulatedCrash
from harness_lab.faults import CrashPoint, ProcessCrash
from harness_lab.loop.approval import AutoApprove
from harness_lab.store import SQLiteStore

# read, read, write a note, delete it, write the report, finish
DELETE: list[dict[str, Any]] = [*ACTIONS[:3], {"kind": "delete_file", "path": "notes/plan.txt"}, ACTIONS[4], ACTIONS[6]]


@pytest.mark.parametrize("point", list(CrashPoint))
def test_a_delete_in_flight_at_a_crash_resumes_to_the_uninterrupted_state(tmp_path: Path, point: CrashPoint) -> None:
    reference = push_run(tmp_path / "ref", None, CountingOutbox(), actions=DELETE)
    assert reference.run() is RunState.REVIEW_READY
    store = SQLiteStore(tmp_path / "runs.sqlite")
    run = push_run(tmp_path / "ws", store, CountingOutbox(), actions=DELETE)
    run.inject(ProcessCrash(point=point), at_step=4)
    with pytest.raises(SimulatedCrash):
        run.run()
    resumed = Run.resume(store, "R1", effects=CountingOutbox(), approver=AutoApprove())
    assert resumed.resume_report is not None and resumed.resume_report.ok, resumed.resume_report.summary()
    resumed.run()
    assert outcome(resumed) == outcome(reference)
    assert [e.status for e in store.effects("R1", 4)] == ["committed"]
    step4 = store.step("R1", 4).record
    assert '"status":"ok"' in step4 and "delete_file" in step4
