"""A stored step record (``dump_step_row``) reads back equal for every shape a run makes, is smaller
than the plain dump, and the older row forms still read."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from persisthelpers import ACTIONS, CountingOutbox, push_run
from pydantic_core import to_json

from harness_lab import Run
from harness_lab.contract import load_contract
from harness_lab.errors import StoreError
from harness_lab.evidence import EvidenceCatalogue
from harness_lab.loop.approval import AutoApprove
from harness_lab.paths import data_dir
from harness_lab.persistence.checkpoint import Checkpoint
from harness_lab.persistence.replay import saved_trace
from harness_lab.persistence.resume import load_checkpoint
from harness_lab.persistence.row_text import dump_step_row
from harness_lab.proposers import ScriptedProposer
from harness_lab.records.events import (
    Decision,
    Proposed,
    StepRecord,
    ToolCalled,
    Usage,
    load_step_row,
)
from harness_lab.records.proposal import parse_proposal
from harness_lab.records.states import RunState
from harness_lab.records.tools import ToolResult
from harness_lab.scenarios import list_scenarios
from harness_lab.store import SCHEMA_VERSION, SQLiteStore, StoredStep

# Proposals of every parse outcome: malformed, unknown kind, bad arguments, forbidden, claims, an action
# spelled unlike its raw form (key order, a filled-in default, an int read as a float), and plain ones.
ODD: list[Any] = [
    "just text",
    {"kind": "teleport", "to": "mars"},
    {"kind": "read_ref", "ref": 3, "start": -1},
    {"kind": "think", "thought": "with a claim", "confidence": 0.9},
    {"thought": "keys in another order", "kind": "think"},
    {"kind": "list_dir", "path": "."},
    {"kind": "run_command", "argv": ["true"], "timeout": 5, "tool_type": "default"},
    {"kind": "read_evidence", "id": "harness-boundary"},
    {"kind": "write_file", "path": "notes/é.txt", "content": "non-ASCII \u2713 and \"quotes\""},
    {"kind": "set_state", "state": "REVIEW_READY"},
]


def _records(tmp_path: Path) -> list[StepRecord]:
    records: list[StepRecord] = []
    for name in list_scenarios():
        with Run.from_scenario(name, workspace=tmp_path / name) as run:
            run.run()
            records.extend(run.records)
    with push_run(tmp_path / "push", None, CountingOutbox()) as run:  # policy-approved gated push
        run.run()
        records.extend(run.records)
    contract = load_contract(data_dir() / "contracts" / "report_task.yaml").with_budget(
        max_decisions=40, max_tool_calls=40)
    evidence = EvidenceCatalogue.from_dir(data_dir() / "evidence")
    with Run(contract=contract, proposer=ScriptedProposer(ODD), evidence=evidence,
             workspace=tmp_path / "odd") as run:
        for at in range(len(ODD)):
            if run.state.terminal:
                break
            if at == 3:
                snapshot = run.sandbox.snapshot(label="before a claim")
            records.append(run.step())
            if at == 4:  # a restore between steps: its event lands in the next record
                run.rollback(snapshot.id)
    for decide in ("approve", "reject"):  # parked for a human, then decided
        with Run(contract=contract, proposer=ScriptedProposer(ACTIONS), evidence=evidence,
                 workspace=tmp_path / decide, effects=CountingOutbox()) as run:
            while run.waiting is None and not run.state.terminal:
                run.step()
            assert run.waiting is not None
            run.approve() if decide == "approve" else run.reject("not now")
            run.run()
            records.extend(run.records)
    return records


def _v3_row(record: StepRecord) -> str:
    """The form rows had before this one (schema 3): the full record, events saying ``same``."""
    data = record.model_dump(mode="json", exclude={"events"})
    events: list[dict[str, Any]] = []
    for event in record.events:
        if type(event) is Proposed and event.proposal is record.proposal and event.decision is record.decision:
            events.append({"seq": event.seq, "step": event.step, "kind": "proposed", "same": True})
        elif type(event) is ToolCalled and event.result is record.tool_result:
            events.append({"seq": event.seq, "step": event.step, "kind": "tool_called", "tool": event.tool,
                           "same": True})
        else:
            events.append(event.model_dump(mode="json"))
    data["events"] = events
    return to_json(data).decode()


def test_every_record_shape_reads_back_equal_from_every_row_form(tmp_path: Path) -> None:
    records = _records(tmp_path)
    kinds = {type(e).__name__ for r in records for e in r.events}
    codes = {r.proposal.error.code for r in records if r.proposal is not None and r.proposal.error is not None}
    verdicts = {r.decision.verdict for r in records}
    assert {"Proposed", "ToolCalled", "StateChanged", "HumanDecided", "Note", "Restored"} <= kinds
    assert any(e.step != r.step for r in records for e in r.events)
    assert codes == {"malformed", "unknown_kind", "bad_arguments"}
    assert {"execute", "validate", "refuse", "park", "approved", "rejected"} <= verdicts
    assert any(r.proposal is not None and r.proposal.claims for r in records)
    assert any(r.verdict is not None for r in records) and any(r.proposal is None for r in records)
    marked = 0
    for record in records:
        row = dump_step_row(record)
        assert load_step_row(row) == record, record.summary()
        assert load_step_row(_v3_row(record)) == record  # schema-3 rows
        assert load_step_row(record.model_dump_json()) == record  # the plain form (older rows)
        assert len(row) < len(_v3_row(record)) <= len(record.model_dump_json())
        marked += '"action":"raw"' in row
    assert marked > len(records) // 2, "most actions are spelled like their raw proposal"


def test_an_action_spelled_unlike_its_raw_form_is_stored_in_full() -> None:
    usage = Usage(decisions=1, tool_calls=1, tokens=1, elapsed_s=0.5)
    decision = Decision(verdict="execute", reason="r")
    for raw, marked in [({"kind": "think", "thought": "t"}, True), ({"thought": "t", "kind": "think"}, False),
                        ({"kind": "run_command", "argv": ["true"], "timeout": 5, "tool_type": "default"}, False),
                        ({"kind": "run_command", "argv": ["true"], "timeout": 5.0, "tool_type": "default"}, True)]:
        proposal = parse_proposal(raw)
        assert proposal.action is not None
        record = StepRecord(step=1, state_before=RunState.RUNNING, state_after=RunState.RUNNING,
                            proposal=proposal, decision=decision, usage=usage)
        row = dump_step_row(record)
        assert ('"action":"raw"' in row) is marked, raw
        back = load_step_row(row)
        assert back == record and to_json(back.proposal.raw if back.proposal else None) == to_json(raw)


def test_a_new_record_is_never_mistaken_for_a_remembered_one() -> None:
    usage = Usage(decisions=1, tool_calls=1, tokens=1, elapsed_s=0.5)
    noted = ToolResult.success("think", "noted")
    proposal = parse_proposal({"kind": "think", "thought": "t"})
    decision = Decision(verdict="execute", reason="first")
    rows = []
    for _ in range(200):  # more than the memo holds: it forgets, never confuses
        decision = Decision(verdict="execute", reason=f"reason {len(rows)}")
        record = StepRecord(step=2, state_before=RunState.RUNNING, state_after=RunState.BLOCKED,
                            proposal=proposal, decision=decision, tool_result=noted, usage=usage)
        rows.append((dump_step_row(record), record))
    for row, record in rows:
        assert load_step_row(row) == record
        assert f'"reason":"{record.decision.reason}"' in row and '"state_after":"BLOCKED"' in row


def test_a_schema_3_file_with_rows_of_its_form_is_upgraded_and_still_resumes(tmp_path: Path) -> None:
    db = tmp_path / "old.sqlite"
    store = SQLiteStore(db)
    with push_run(tmp_path / "ws", store, CountingOutbox()) as run:
        for _ in range(4):
            run.step()
        expected = saved_trace(store, "R1")
        checkpoints = [load_checkpoint(store, "R1", step)[0] for step in range(5)]
        whole = {row.step: row.checkpoint for row in store.steps("R1", start=0)}  # (schema 8 rows hold deltas)
    store.close()
    conn = sqlite3.connect(db)  # rewrite every row as schema 3 wrote it
    for step, record in conn.execute("SELECT step, record FROM steps").fetchall():
        old = _v3_row(load_step_row(record)) if record != "null" else record
        full = Checkpoint.from_row(StoredStep("R1", step, 0.0, record, whole[step], None)).model_dump_json()
        conn.execute("UPDATE steps SET record = ?, checkpoint = ?, base = NULL WHERE step = ?", (old, full, step))
    conn.execute("UPDATE schema_version SET version = 3")
    conn.commit()
    conn.close()
    store = SQLiteStore(db, create=False)
    assert sqlite3.connect(db).execute("SELECT version FROM schema_version").fetchone()[0] == SCHEMA_VERSION == 9
    assert '"state_after"' in store.step("R1", 2).record  # the old form is what is read back
    assert saved_trace(store, "R1") == expected
    assert [load_checkpoint(store, "R1", step)[0] for step in range(5)] == checkpoints
    resumed = Run.resume(store, "R1", effects=CountingOutbox())
    assert resumed.resume_report is not None and resumed.resume_report.ok, resumed.resume_report
    assert resumed.run() is RunState.REVIEW_READY
    assert [load_step_row(row.record) for row in store.steps("R1", start=5)]  # new rows follow the old ones
    store.close()


_OLD_STEPS = ("CREATE TABLE steps (run_id TEXT NOT NULL, step INTEGER NOT NULL, at REAL NOT NULL, record TEXT NOT NULL,"
              " checkpoint TEXT NOT NULL, context TEXT, PRIMARY KEY (run_id, step)) WITHOUT ROWID")
_OLD_RUNS = ("CREATE TABLE runs (run_id TEXT PRIMARY KEY, spec TEXT NOT NULL, created_at REAL NOT NULL,"
             " status TEXT NOT NULL DEFAULT 'active', status_reason TEXT NOT NULL DEFAULT '')")


def test_new_files_key_step_rows_by_one_integer_and_older_layouts_work_the_same(tmp_path: Path) -> None:
    new = tmp_path / "new.sqlite"
    SQLiteStore(new).close()
    conn = sqlite3.connect(new)
    sql = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'steps'").fetchone()[0]
    assert "id INTEGER PRIMARY KEY" in sql and "WITHOUT ROWID" not in sql.upper()
    assert conn.execute("SELECT count(*) FROM sqlite_master WHERE type = 'index' AND tbl_name = 'steps'").fetchone() == (0,)
    conn.close()
    outcomes = []
    # Files made before: schema 4's rowid table keyed (run_id, step), and the WITHOUT ROWID one before it.
    for name, steps_sql in (("new", None), ("rowid", _OLD_STEPS.removesuffix(" WITHOUT ROWID")), ("old", _OLD_STEPS)):
        db = tmp_path / f"{name}.sqlite"
        if steps_sql is not None:
            SQLiteStore(db).close()
            conn = sqlite3.connect(db)
            conn.execute("DROP TABLE steps")
            conn.execute(steps_sql)
            conn.execute("DROP TABLE runs")
            conn.execute(_OLD_RUNS)
            conn.execute("UPDATE schema_version SET version = ?", (4 if name == "rowid" else 3,))
            conn.commit()
            conn.close()
        store = SQLiteStore(db)
        with push_run(tmp_path / f"ws-{name}", store, CountingOutbox()) as run:
            for _ in range(3):
                run.step()
            with pytest.raises(StoreError, match="run 'R1' already has step 3; refused to overwrite"):
                store.commit_step("R1", 3, 0.0, "null", "{}", None)  # names the run and step, whatever the layout
        resumed = Run.resume(store, "R1", effects=CountingOutbox(), approver=AutoApprove())
        assert resumed.run() is RunState.REVIEW_READY
        last = store.last_step("R1")
        outcomes.append(([(r.step, r.state_after) for r in saved_trace(store, "R1")],
                         [h.step for h in store.history("R1")], len(store.contexts("R1", 2, 5)),
                         last.step if last is not None else None))
        store.close()
    assert outcomes[0] == outcomes[1] == outcomes[2] and outcomes[0][1] == list(range(len(ACTIONS) + 1))


def test_step_keys_keep_runs_apart_and_refuse_what_they_cannot_key(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "keys.sqlite")
    for run_id in ("a", "b"):
        store.create_run(run_id, {"kind": "run_spec"}, 0.0)
    for step in (0, 1, 2):  # interleaved: each run reads back only its own rows
        store.commit_step("b", step, float(step), f'"b{step}"', "{}", None)
        store.commit_step("a", step, float(step), f'"a{step}"', "{}", None)
    store.commit_step("a", 2**32 - 1, 9.0, '"a-last"', "{}", None)
    assert [r.record for r in store.steps("a", 0)] == ['"a0"', '"a1"', '"a2"', '"a-last"']
    assert [h.step for h in store.history("b")] == [0, 1, 2]
    last = store.last_step("b")
    assert last is not None and last.record == '"b2"'
    assert store.step("a", 1).record == '"a1"' and store.contexts("b", 1, 5) == [(1, None), (2, None)]
    with pytest.raises(StoreError, match="out of range"):
        store.commit_step("a", 2**32, 0.0, "null", "{}", None)
    with pytest.raises(StoreError, match="unknown run id .nobody."):
        store.commit_step("nobody", 1, 0.0, "null", "{}", None)
    with pytest.raises(StoreError, match="run 'b' already has step 1; refused to overwrite"):
        store.commit_step("b", 1, 0.0, "null", "{}", None)
    store.close()
