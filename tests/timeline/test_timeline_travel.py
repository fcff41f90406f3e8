"""Time travel over the shipped ``missing_limitations`` run (it ends EXHAUSTED): every step a point,
``at(n)`` the report at step n, a fork from step 3 with a fresh budget and an edited report reaching
REVIEW_READY, a rollback to a step, ``Run.open`` read-only, and the store's files beside the rows."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from harness_lab import Run
from harness_lab.errors import ConfigError, RunStateError
from harness_lab.proposers import FunctionProposer
from harness_lab.records.events import Usage
from harness_lab.records.proposal import parse_proposal
from harness_lab.records.states import RunState
from harness_lab.store import SCHEMA_VERSION, InMemoryStore, SQLiteStore
from harness_lab.timeline.files import FULL_EVERY
from tests.loop.loophelpers import READ_A, READ_B, READ_C, contract, evidence, make_run
from tests.timeline.timelinehelpers import RecordingProposer, Seen, shown

LIMITATIONS = "\n\n## Limitations\n- Only two harness designs were compared [E:harness-boundary].\n"


def _exhausted(store: InMemoryStore | SQLiteStore, tmp_path: Path) -> Run:
    run = Run.from_scenario("missing_limitations", store=store, workspace=tmp_path / "ws")
    assert run.run() is RunState.EXHAUSTED
    return run


def test_every_step_is_a_point_and_at_3_shows_the_report_the_step_wrote(tmp_path: Path) -> None:
    run = _exhausted(InMemoryStore(), tmp_path)
    points = run.history
    assert [p.step for p in points] == list(range(run.step_no + 1))
    assert points[0].decision is None and points[0].state is RunState.CREATED
    assert [p.tool for p in points[1:4]] == ["read_evidence", "read_evidence", "write_report"]
    assert points[-1].state is RunState.EXHAUSTED and points[-1].stop == "decision_budget"
    assert [p.spent.decisions for p in points[:4]] == [0, 1, 2, 3]
    assert points[4].accepted is False
    view = run.at(3)
    assert view.proposal is not None and view.proposal.action is not None
    assert view.proposal.action.kind == "write_report" and view.decision is not None
    assert view.file_text("report.md") == (run.workspace / "report.md").read_text()
    assert [(c.path, c.change) for c in view.changes] == [("report.md", "added")]
    assert "+## Evidence" in view.changes[0].diff
    assert run.at(2).files == {} and run.at(4).changes == []
    # the context the proposer saw at step 3 holds what steps 1 and 2 read, in full
    assert view.context is not None and "acceptance-snapshot" in view.context.render()
    with pytest.raises(RunStateError, match=r"^no file 'notes.md' in the workspace at step 3$"):
        view.file_text("notes.md")


def test_a_fork_from_step_3_with_a_fresh_budget_and_an_edited_report_reaches_review_ready(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.sqlite")
    run = _exhausted(store, tmp_path)
    rows = [s.checkpoint for s in store.steps(run.run_id, 0)]
    text = run.at(3).file_text("report.md")
    fork = run.fork(at_step=3, budget="fresh", workspace=tmp_path / "fork")
    assert fork.step_no == 3 and fork.state is RunState.RUNNING and fork.usage == Usage()
    assert (fork.workspace / "report.md").read_text() == text
    fork.edit_pending({"kind": "write_report", "text": text + LIMITATIONS})
    assert fork.run() is RunState.REVIEW_READY
    assert [s.checkpoint for s in store.steps(run.run_id, 0)] == rows and run.state is RunState.EXHAUSTED
    assert "## Limitations" in fork.at(fork.step_no).file_text("report.md")
    fork.close()
    run.close()
    store.close()


def test_keep_is_the_spend_at_the_step_not_the_sources_current_spend(tmp_path: Path) -> None:
    run = _exhausted(InMemoryStore(), tmp_path)
    kept = run.fork(at_step=3, workspace=tmp_path / "kept")
    assert kept.usage.decisions == 3 == run.at(3).point.spent.decisions < run.usage.decisions
    assert kept.usage.tokens == run.at(3).point.spent.tokens
    some = run.fork(at_step=3, budget={"decisions": 1, "tokens": 0}, workspace=tmp_path / "some")
    assert (some.usage.decisions, some.usage.tokens, some.usage.tool_calls) == (1, 0, run.at(3).point.spent.tool_calls)
    # the decision budget was what ran out: with the spend of step 3 the fork takes more steps again
    assert kept.step().decision.verdict == "validate"


def test_rollback_to_a_step_restores_its_files_state_and_chosen_budget(tmp_path: Path) -> None:
    run = _exhausted(InMemoryStore(), tmp_path)
    (run.workspace / "stray.txt").write_text("written after the run")
    last = run.step_no
    run.rollback(to_step=2, budget="fresh")
    assert run.state is RunState.RUNNING and run.usage == Usage() and run.step_no == last
    assert not (run.workspace / "report.md").exists() and not (run.workspace / "stray.txt").exists()
    record = run.step()  # the script goes on from step 2: it writes the report again
    assert record.step == last + 1 and record.proposal is not None and record.proposal.action is not None
    assert record.proposal.action.kind == "write_report" and (run.workspace / "report.md").exists()


def test_snapshot_now_and_roll_back_to_it(tmp_path: Path) -> None:
    run = _exhausted(InMemoryStore(), tmp_path)
    info = run.snapshot("before the fix")
    assert info.label == "before the fix" and info.run_state is not None
    (run.workspace / "report.md").write_text("broken")
    run.rollback(info.id)
    assert (run.workspace / "report.md").read_text() == run.at(3).file_text("report.md")


def test_open_reads_without_writing_and_refuses_to_step(tmp_path: Path) -> None:
    db = tmp_path / "runs.sqlite"
    store = SQLiteStore(db)
    run = _exhausted(store, tmp_path)
    live = run.history
    run.close()
    store.close()
    before = {p.name: p.read_bytes() for p in tmp_path.glob("runs.sqlite*")}
    opened = Run.open(db, "missing_limitations")
    assert opened.history == live and opened.state is RunState.EXHAUSTED
    assert opened.at(3).file_text("report.md").startswith("# Report")
    with pytest.raises(RunStateError, match=r"^run missing_limitations was opened read-only \(Run.open\): resume it to continue$"):
        opened.step()
    with pytest.raises(RunStateError, match="opened read-only"):
        opened.rollback(to_step=2)
    fork_ws = tmp_path / "fork"
    # the store was opened read-only: the fork is not registered in it (Run.open(SQLiteStore(db), ...) would)
    fork = opened.fork(at_step=3, budget="fresh", workspace=fork_ws, new_run_id="F")
    assert fork.checkpoints is None and (fork_ws / "report.md").exists()
    fork.edit_pending({"kind": "write_report", "text": opened.at(3).file_text("report.md") + LIMITATIONS})
    assert fork.run() is RunState.REVIEW_READY
    fork.close()
    opened.close()
    assert {p.name: p.read_bytes() for p in tmp_path.glob("runs.sqlite*")} == before


@pytest.mark.parametrize("bad, message", [
    (10, r"^step 10 is out of range: run missing_limitations has steps 0\.\.9$"),
    (-1, r"^step -1 is out of range: run missing_limitations has steps 0\.\.9$"),
    ("3", r"^step '3' is out of range: run missing_limitations has steps 0\.\.9$"),
    (True, r"^step True is out of range"),
])
def test_a_step_out_of_range_is_one_line_and_nothing_is_written(tmp_path: Path, bad: object, message: str) -> None:
    store = InMemoryStore()
    run = _exhausted(store, tmp_path)
    runs = store.run_ids()
    with pytest.raises(RunStateError, match=message):
        run.at(bad)  # type: ignore[arg-type]
    with pytest.raises(RunStateError, match=message):
        run.fork(at_step=bad, workspace=tmp_path / "fork")  # type: ignore[arg-type]
    with pytest.raises(RunStateError, match=message):
        run.rollback(to_step=bad)  # type: ignore[arg-type]
    assert store.run_ids() == runs and not (tmp_path / "fork").exists() and run.state is RunState.EXHAUSTED


@pytest.mark.parametrize("budget, message", [
    ("half", r"^budget 'half': 'keep', 'fresh' or a mapping of decisions, tool_calls, tokens, elapsed_s$"),
    ({"tokenz": 5}, r"^budget key 'tokenz': not a spend field \(known: decisions, tool_calls, tokens, elapsed_s\)$"),
    ({"tokens": -1}, r"^budget tokens=-1: a whole number >= 0$"),
    ({"decisions": 1.5}, r"^budget decisions=1.5: a whole number >= 0$"),
])
def test_a_bad_budget_is_one_line_and_nothing_is_written(tmp_path: Path, budget: object, message: str) -> None:
    store = InMemoryStore()
    run = _exhausted(store, tmp_path)
    runs = store.run_ids()
    with pytest.raises(ConfigError, match=message):
        run.fork(at_step=3, budget=budget, workspace=tmp_path / "fork")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=message):
        run.rollback(to_step=3, budget=budget)  # type: ignore[arg-type]
    assert store.run_ids() == runs and not (tmp_path / "fork").exists() and run.state is RunState.EXHAUSTED


def test_a_closed_run_a_crashed_run_and_a_run_without_a_store_refuse_in_one_line(tmp_path: Path) -> None:
    store = InMemoryStore()
    run = _exhausted(store, tmp_path)
    run.close()
    with pytest.raises(RunStateError, match=r"^run missing_limitations is closed: cannot fork it \(Run.open"):
        run.fork(at_step=3)
    crashed = Run.from_scenario("missing_limitations", store=store, run_id="C", workspace=tmp_path / "c")
    crashed.inject("process_crash", at_step=2)
    with pytest.raises(Exception, match="crash"):
        crashed.run()
    with pytest.raises(RunStateError, match=r"^run C crashed at after_effect \(simulated\): resume it first, then fork it$"):
        crashed.fork(at_step=1)
    bare = make_run(tmp_path, [{"kind": "list_dir", "path": "."}], name="bare")
    bare.step()
    with pytest.raises(RunStateError, match=r"^run run has no store: give it InMemoryStore\(\) or SQLiteStore\(path\)"):
        bare.at(1)
    with pytest.raises(RunStateError, match=r"^fork: give exactly one of"):
        bare.fork("run@1", at_step=1)
    assert store.run_ids() == ["C", "missing_limitations"]


def test_a_file_holding_a_secret_is_listed_and_its_bytes_are_never_stored(tmp_path: Path) -> None:
    db = tmp_path / "runs.sqlite"
    store = SQLiteStore(db)
    run = make_run(tmp_path, [{"kind": "write_file", "path": ".env", "content": "password=hunter2hunter2\n"},
                              {"kind": "write_file", "path": "notes.txt", "content": "plain\n"}], store=store)
    run.run(max_steps=2)
    view = run.at(2)
    assert set(view.files) == {".env", "notes.txt"} and view.file_text("notes.txt") == "plain\n"
    with pytest.raises(RunStateError, match=r"^file '.env' at step 2: its bytes .* are not in the store \(withheld"):
        view.file_text(".env")
    run.close()
    store.close()
    assert b"hunter2hunter2" not in b"".join(p.read_bytes() for p in tmp_path.glob("runs.sqlite*"))


def test_reading_the_files_of_any_step_folds_a_bounded_number_of_rows(tmp_path: Path) -> None:
    store = InMemoryStore()
    actions = [{"kind": "write_file", "path": f"f{i % 7}.txt", "content": f"{i}\n"} for i in range(60)]
    run = make_run(tmp_path, actions, store=store,
                   contract_=contract(max_decisions=100, max_tool_calls=100, max_tokens=10**7))
    run.run(max_steps=60)
    assert run.step_no == 60
    assert max(len(store.manifests(run.run_id, n)) for n in range(61)) <= FULL_EVERY
    assert run.at(60).file_text("f3.txt") == "59\n" and run.at(25).file_text("f3.txt") == "24\n" and run.at(25).file_text("f4.txt") == "18\n"


def test_an_older_store_gains_the_file_tables_on_open(tmp_path: Path) -> None:
    db = tmp_path / "old.sqlite"
    SQLiteStore(db).close()
    with sqlite3.connect(db) as conn:
        conn.execute("DROP TABLE files")
        conn.execute("DROP TABLE manifests")
        conn.execute("UPDATE schema_version SET version = 6")
    reader = SQLiteStore(db, read_only=True)  # read as it is: no files kept
    assert reader.manifests("x", 3) == [] and reader.file_data("0" * 64) is None
    reader.close()
    SQLiteStore(db).close()
    with sqlite3.connect(db) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert {"files", "manifests"} <= tables
        assert conn.execute("SELECT version FROM schema_version").fetchone()[0] == SCHEMA_VERSION


def test_a_forks_timeline_starts_with_its_sources_steps_before_the_fork_point(tmp_path: Path) -> None:
    run = _exhausted(InMemoryStore(), tmp_path)
    fork = run.fork(at_step=3, budget="fresh", workspace=tmp_path / "fork")
    fork.edit_pending({"kind": "write_report", "text": run.at(3).file_text("report.md") + LIMITATIONS})
    fork.run()
    points = fork.history
    assert [(p.run_id, p.step) for p in points] == [
        *((run.run_id, n) for n in range(3)), *((fork.run_id, n) for n in range(3, fork.step_no + 1))]
    assert points[3].spent == Usage() and points[2] == run.history[2]
    assert fork.at(2).context == run.at(2).context and fork.at(1).decision == run.at(1).decision
    assert [(c.path, c.change) for c in fork.at(4).changes] == [("report.md", "modified")]
    again = fork.fork(at_step=1, workspace=tmp_path / "again")  # a step of the source, from the fork
    assert again.step_no == 1 and [p.run_id for p in again.history] == [run.run_id, again.run_id]


def test_after_a_rollback_at_shows_the_context_the_next_proposer_saw(tmp_path: Path) -> None:
    seen = Seen()
    actions = [READ_A, READ_B, {"kind": "write_file", "path": "a.txt", "content": "one\n"}, READ_C, READ_A]
    store = InMemoryStore()
    run = Run(contract=contract(), evidence=evidence(), proposer=RecordingProposer(actions, seen),
              workspace=tmp_path / "ws", store=store)
    seen.run = run
    run.run(max_steps=4)
    before = run.history  # kept with the run: the next call reads only the rows committed since
    run.rollback(to_step=2, budget="fresh")
    run.step()
    assert len(run.history) == 6 and run.history[:5] == before and run.history == Run.open(store, "run").history
    assert run.history[5].spent.decisions == 1 and run.history[5].tool == "write_file"
    view = run.at(5)
    assert view.context is not None and shown(view.context) == seen.views[5]
    assert shown(view.context) != shown(run.at(4).context)  # not the context of the row before
    # the script went on from step 2: a.txt written again, the same bytes as step 4 had (the diff is against it)
    assert view.proposal is not None and view.proposal.raw["kind"] == "write_file" and view.changes == []
    info = run.snapshot()
    run.rollback(info.id)
    run.step()
    assert run.at(6).context is None  # a snapshot's context is not in the store: said, not made up


def test_a_run_of_another_proposer_opens_and_its_fork_needs_one(tmp_path: Path) -> None:
    store = InMemoryStore()
    run = Run(contract=contract(), evidence=evidence(), proposer=FunctionProposer(lambda view: READ_A),
              workspace=tmp_path / "ws", store=store, run_id="M")
    run.run(max_steps=2)
    opened = Run.open(store, "M")
    assert [p.tool for p in opened.history] == [None, "read_evidence", "read_evidence"]
    orphan = opened.fork(at_step=1, workspace=tmp_path / "orphan")
    record = orphan.step()  # no proposer: a recorded, safe stop naming what to do
    assert record.decision.verdict == "block" and "pass Run.open(..., proposer=)" in record.decision.reason
    given = Run.open(store, "M", proposer=FunctionProposer(lambda view: READ_B)).fork(at_step=1, workspace=tmp_path / "given")
    assert given.step().proposal == parse_proposal(READ_B)


def test_a_rollback_to_a_step_whose_file_was_withheld_touches_nothing(tmp_path: Path) -> None:
    run = make_run(tmp_path, [{"kind": "write_file", "path": ".env", "content": "password=hunter2hunter2\n"},
                              {"kind": "write_file", "path": ".env", "content": "password=(none)\n"},
                              {"kind": "write_file", "path": "notes.txt", "content": "plain\n"}], store=InMemoryStore())
    run.run(max_steps=3)
    with pytest.raises(RunStateError, match=r"^step 1 of run run: the bytes of .env .* are not in the store \(withheld"):
        run.rollback(to_step=1)
    assert (run.workspace / "notes.txt").read_text() == "plain\n"
    assert (run.workspace / ".env").read_text() == "password=(none)\n"
    assert run.step_no == 3 and run.state is RunState.RUNNING


def test_an_l5_reference_opens_at_the_step_that_stored_it_and_after(tmp_path: Path) -> None:
    big = "\n".join(f"line {i} of a long log" for i in range(3000))
    run = make_run(tmp_path, [{"kind": "write_file", "path": "log.txt", "content": big},
                              {"kind": "read_file", "path": "log.txt"}, {"kind": "list_dir", "path": "."}],
                   store=InMemoryStore())
    run.run(max_steps=3)
    view = run.at(3)
    assert view.context is not None and "output stored as ref_001" in view.context.render()
    assert view.ref("ref_001") == big == run.at(2).ref("ref_001")  # step 2's result stored it
    with pytest.raises(RunStateError, match=r"^no reference 'ref_009' in run run's context at step 3$"):
        view.ref("ref_009")
    with pytest.raises(RunStateError, match=r"^no reference 'ref_001' in run run's context at step 0$"):
        run.at(0).ref("ref_001")


def test_a_forks_files_are_proven_not_stored_again_and_its_snapshots_still_restore_them(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.sqlite")
    run = _exhausted(store, tmp_path)
    text = run.at(3).file_text("report.md")
    fork = run.fork(at_step=3, budget="fresh", workspace=tmp_path / "fork")
    blobs = Path(fork.sandbox.capabilities["snapshot_dir"]) / "blobs"
    first = fork.sandbox.snapshot()
    assert not blobs.exists()  # the first scan read the file; its bytes stay in memory until needed
    assert fork.sandbox.call("write_file", path="report.md", content="overwritten").ok
    fork.sandbox.rollback(first.id)
    assert (fork.workspace / "report.md").read_text() == text
    again = fork.fork(first.id, workspace=tmp_path / "again")  # materialized from the held bytes
    assert (again.workspace / "report.md").read_text() == text
    assert fork.sandbox.call("write_file", path="report.md", content="overwritten again").ok
    fork.rollback(to_step=3)
    assert (fork.workspace / "report.md").read_text() == text
    for r in (again, fork, run):
        r.close()
    store.close()
