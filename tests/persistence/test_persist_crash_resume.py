"""Kill a run at each instrumented point of each step; the resumed run matches an uninterrupted one."""

from __future__ import annotations

from pathlib import Path

import pytest
from persisthelpers import ACTIONS, PUSH_STEP, CountingOutbox, outcome, push_run

from harness_lab import Run, RunState
from harness_lab.errors import SimulatedCrash
from harness_lab.faults import CrashPoint, ProcessCrash
from harness_lab.sandbox.fileops import TEMP_PREFIX
from harness_lab.store import InMemoryStore, SQLiteStore

# Every step has the two commit points; the effect points exist where a tool runs (not at finish).
CASES = [(point, step) for step in range(1, len(ACTIONS) + 1) for point in CrashPoint
         if ACTIONS[step - 1]["kind"] != "finish" or point in (CrashPoint.BEFORE_COMMIT, CrashPoint.AFTER_COMMIT)]


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    outbox = CountingOutbox()
    run = push_run(tmp_path_factory.mktemp("ref") / "ws", None, outbox)
    assert run.run() is RunState.REVIEW_READY
    assert outbox.applied == [f"R1:{PUSH_STEP}"]
    return outcome(run)


def _crash_then_resume(tmp_path: Path, point: CrashPoint, step: int, sqlite: bool) -> tuple[Run, CountingOutbox]:
    store = SQLiteStore(tmp_path / "runs.sqlite") if sqlite else InMemoryStore()
    outbox = CountingOutbox()
    run = push_run(tmp_path / "ws", store, outbox)
    run.inject(ProcessCrash(point=point), at_step=step)
    with pytest.raises(SimulatedCrash):
        run.run()
    resumed = Run.resume(store, "R1", effects=outbox, approver=run.approver)
    assert resumed.resume_report is not None
    resumed.run()
    return resumed, outbox


@pytest.mark.parametrize(("point", "step"), CASES)
def test_resume_after_crash_matches_uninterrupted(tmp_path: Path, point: CrashPoint, step: int,
                                                  reference: dict[str, object]) -> None:
    in_flight_push = step == PUSH_STEP and point in (CrashPoint.AFTER_EFFECT, CrashPoint.BEFORE_COMMIT)
    resumed, outbox = _crash_then_resume(tmp_path, point, step, sqlite=True)
    assert resumed.resume_report is not None and resumed.resume_report.ok, resumed.resume_report
    assert outbox.applied == [f"R1:{PUSH_STEP}"], "the push is applied exactly once, never twice"
    if in_flight_push:
        # The push landed but its step never committed: its outcome is unknown to the store.
        assert resumed.state is RunState.BLOCKED
        assert resumed.stop_reason is not None and resumed.stop_reason.code == "effect_uncertain"
    else:
        assert outcome(resumed) == reference


@pytest.mark.parametrize("point", [CrashPoint.AFTER_EFFECT, CrashPoint.BEFORE_COMMIT])
def test_in_memory_store_resumes_the_same_way(tmp_path: Path, point: CrashPoint,
                                              reference: dict[str, object]) -> None:
    resumed, outbox = _crash_then_resume(tmp_path, point, 5, sqlite=False)  # the report write in flight
    assert outcome(resumed) == reference
    assert outbox.applied == [f"R1:{PUSH_STEP}"]


def test_uncertain_effect_is_never_retried_even_on_a_second_resume(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.sqlite")
    outbox = CountingOutbox()
    run = push_run(tmp_path / "ws", store, outbox)
    run.inject(ProcessCrash(point=CrashPoint.AFTER_EFFECT), at_step=PUSH_STEP)
    with pytest.raises(SimulatedCrash):
        run.run()
    first = Run.resume(store, "R1", effects=outbox, approver=run.approver)
    assert first.state is RunState.BLOCKED
    effect = store.effect(f"R1:{PUSH_STEP}")
    assert effect is not None and effect.status == "uncertain"
    again = Run.resume(store, "R1", effects=outbox, approver=run.approver)
    assert again.state is RunState.BLOCKED and len(outbox.applied) == 1


def test_redone_write_lands_once_in_the_ledger(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.sqlite")
    run = push_run(tmp_path / "ws", store, CountingOutbox())
    run.inject(ProcessCrash(point=CrashPoint.AFTER_EFFECT), at_step=3)
    with pytest.raises(SimulatedCrash):
        run.run()
    assert (tmp_path / "ws" / "notes" / "plan.txt").exists(), "the write landed before the crash"
    resumed = Run.resume(store, "R1", effects=CountingOutbox(), approver=run.approver)
    report = resumed.resume_report
    assert report is not None and "in flight" in report.checks[1].detail
    resumed.run()
    effect = store.effect("R1:3")
    assert effect is not None and effect.status == "committed"


@pytest.mark.parametrize("where", ["", "notes/"])
def test_a_write_killed_before_its_rename_leaves_a_temporary_file_that_resume_removes(
        tmp_path: Path, where: str, reference: dict[str, object]) -> None:
    # A SIGKILL between the temporary file's creation and its rename (bench/stress_kill.py met it):
    # the report write (step 5, in the workspace root) is in flight and its temporary file lies beside
    # report.md. A temporary-looking file anywhere else is not that write's: a concurrent change.
    store = SQLiteStore(tmp_path / "runs.sqlite")
    outbox = CountingOutbox()
    run = push_run(tmp_path / "ws", store, outbox)
    run.inject(ProcessCrash(point=CrashPoint.AFTER_EFFECT), at_step=5)  # its write-ahead intent is stored
    with pytest.raises(SimulatedCrash):
        run.run()
    (tmp_path / "ws" / "report.md").unlink()  # ... but the kill came before the rename
    debris = tmp_path / "ws" / f"{where}{TEMP_PREFIX}0123456789ab"
    debris.write_bytes(b"# Rep")  # half written
    resumed = Run.resume(store, "R1", effects=outbox, approver=run.approver)
    assert resumed.resume_report is not None
    if where:
        assert not resumed.resume_report.ok and "concurrent change" in resumed.resume_report.checks[1].detail
        assert resumed.state is RunState.BLOCKED and debris.exists(), "nothing of the user's is removed"
        return
    assert resumed.resume_report.ok, resumed.resume_report
    assert "temporary file(s) it left" in resumed.resume_report.checks[1].detail
    assert not debris.exists()
    resumed.run()
    assert outcome(resumed) == reference
    assert outbox.applied == [f"R1:{PUSH_STEP}"]
