"""Property: for random scripted runs with faults (a crash and resume among them), ``Run.open(...).at(n)``
after the run shows, for every step n, exactly what the live run showed then: the view the proposer was
given (rendered text, tokens, budget, tokens left), the decision and the workspace files."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness_lab import Run
from harness_lab.errors import SimulatedCrash
from harness_lab.faults import CrashPoint
from harness_lab.faults.catalogue import (
    EmptyResult,
    MalformedProposal,
    ProcessCrash,
    ToolException,
    ToolTimeout,
)
from harness_lab.store import SQLiteStore
from tests.loop.loophelpers import FINISH, READ_A, READ_B, READ_C, WRITE_GOOD, contract, evidence
from tests.timeline.timelinehelpers import RecordingProposer, Seen, note_step, workspace_files

ACTIONS = st.one_of(
    st.sampled_from([READ_A, READ_B, READ_C, WRITE_GOOD, FINISH, {"kind": "list_dir", "path": "."},
                     {"kind": "write_report", "text": "# Report\n\nnot yet [E:harness-boundary]\n"}]),
    st.builds(lambda name, text: {"kind": "write_file", "path": f"notes/{name}.txt", "content": text},
              st.sampled_from(["a", "b", "c"]), st.text("xyz\n", max_size=12)),
    st.builds(lambda name: {"kind": "delete_file", "path": f"notes/{name}.txt"}, st.sampled_from(["a", "b"])),
    st.builds(lambda name: {"kind": "read_file", "path": f"notes/{name}.txt"}, st.sampled_from(["a", "c"])),
)
FAULTS = st.sampled_from([
    ToolException(), ToolTimeout(), EmptyResult(), MalformedProposal(),
    ProcessCrash(point=CrashPoint.AFTER_EFFECT), ProcessCrash(point=CrashPoint.BEFORE_COMMIT),
    ProcessCrash(point=CrashPoint.AFTER_COMMIT),
])


def _drive(db: Path, workspace: Path, actions: list[Any], faults: list[tuple[int, Any]]) -> Seen:
    seen = Seen()
    store = SQLiteStore(db)
    run = Run(contract=contract(max_decisions=14, max_tool_calls=14), evidence=evidence(),
              proposer=RecordingProposer(actions, seen), workspace=workspace, run_id="P", store=store)
    seen.run = run
    for step, fault in faults:
        run.inject(fault, at_step=step)
    while run.step_due:
        try:
            note_step(seen, run, run.step())
        except SimulatedCrash:
            # kill -9: the object is gone; a new process resumes from the store, with the same script
            store.close()
            run.close()
            store = SQLiteStore(db, create=False)
            run = Run.resume(store, "P", proposer=RecordingProposer(actions, seen))
            seen.run = run
            if run.state.terminal:
                break
    seen.files[run.step_no] = workspace_files(run)
    run.close()
    store.close()
    return seen


@settings(max_examples=12, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(actions=st.lists(ACTIONS, min_size=2, max_size=9),
       faults=st.lists(st.tuples(st.integers(1, 10), FAULTS), max_size=3, unique_by=lambda f: f[0]))
def test_at_n_after_reopening_is_what_the_live_run_showed_at_step_n(actions: list[Any],
                                                                    faults: list[tuple[int, Any]]) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        db = Path(scratch) / "runs.sqlite"
        seen = _drive(db, Path(scratch) / "ws", actions, faults)
        opened = Run.open(db, "P")
        try:
            points = opened.history
            assert [p.step for p in points] == list(range(len(points)))
            assert seen.views, "the proposer was asked at least once"
            for n in range(1, len(points)):
                view = opened.at(n)
                if n in seen.views:
                    assert view.context is not None
                    got = (view.context.render(), view.context.total_tokens, view.context.budget_tokens,
                           view.context.tokens_left)
                    assert got == seen.views[n], f"step {n}: the context differs from what the proposer saw"
                if n in seen.decisions:
                    assert view.decision is not None and view.decision.verdict == seen.decisions[n]
                if n in seen.files:
                    assert view.files == seen.files[n], f"step {n}: the files differ"
                    assert view.point.workspace_hash is not None
        finally:
            opened.close()
