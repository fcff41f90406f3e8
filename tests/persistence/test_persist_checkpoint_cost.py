"""Checkpoints cost what a step changed: the context is a change log between whole states, large
outputs are blobs written once, and every checkpoint still restores the exact context."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from persisthelpers import CountingOutbox, push_run

from harness_lab import Run
from harness_lab.context import ContextItem
from harness_lab.persistence.checkpoint import FULL_EVERY
from harness_lab.persistence.resume import load_checkpoint
from harness_lab.store import SCHEMA_VERSION, InMemoryStore, SQLiteStore, Store

BIG = "".join(f"line {k}: nothing unusual here\n" for k in range(1200))  # ~36 KB: a stored output
READS = [{"kind": "read_evidence", "id": i} for i in ("harness-boundary", "acceptance-snapshot", "budget-gates")]
ACTIONS = [{"kind": "write_file", "path": "big.log", "content": BIG}, {"kind": "read_file", "path": "big.log"},
           *READS * 80]


def _long_run(tmp_path: Path, store: Store, steps: int) -> tuple[Run, dict[int, Any]]:
    run = push_run(tmp_path / "ws", store, CountingOutbox(), actions=ACTIONS, max_decisions=10**6)
    run.gates.repeat_limit = 10**6  # cycling three reads is the point here, not convergence
    states = {0: json.loads(json.dumps(run.context.state(ref_texts=False)))}
    for _ in range(steps):
        run.step()
        states[run.step_no] = json.loads(json.dumps(run.context.state(ref_texts=False)))
    return run, states


@pytest.mark.parametrize("kind", ["sqlite", "memory"])
def test_every_checkpoint_restores_the_exact_context(tmp_path: Path, kind: str) -> None:
    store = SQLiteStore(tmp_path / "runs.sqlite") if kind == "sqlite" else InMemoryStore()
    run, states = _long_run(tmp_path, store, 2 * FULL_EVERY + 20)
    for step in sorted({*range(0, run.step_no + 1, 5), FULL_EVERY - 1, FULL_EVERY, FULL_EVERY + 1, run.step_no}):
        checkpoint, context = load_checkpoint(store, "R1", step)
        assert context is not None and _full(context) == states[step], f"step {step}"
        assert checkpoint.context_base is not None and step - FULL_EVERY < checkpoint.context_base <= step
    fork = run.fork(f"R1@{run.step_no}", workspace=tmp_path / "fork")
    assert fork.context.view() == run.context.view()
    assert fork.context.read_ref("ref_001") == BIG  # read back from the store's blob
    fork.close()
    run.close()


def _full(state: dict[str, Any]) -> dict[str, Any]:
    """A stored state with each item in full (rows leave out fields at their default)."""
    return {**state, "items": [ContextItem.from_dict(entry).to_dict() for entry in state["items"]]}


def test_rows_do_not_grow_with_history_and_outputs_are_stored_once(tmp_path: Path) -> None:
    db = tmp_path / "runs.sqlite"
    store = SQLiteStore(db)
    run, _ = _long_run(tmp_path, store, 3 * FULL_EVERY)
    run.close()
    store.close()
    conn = sqlite3.connect(db)
    rows = conn.execute("SELECT step, length(context), length(checkpoint) FROM steps ORDER BY step").fetchall()
    whole = [s for s, _, _ in rows if s % FULL_EVERY == 0]
    assert whole == [0, FULL_EVERY, 2 * FULL_EVERY, 3 * FULL_EVERY]
    logs = {s: (c, k) for s, c, k in rows if s % FULL_EVERY}
    early = max(c + k for s, (c, k) in logs.items() if 10 <= s < FULL_EVERY)
    late = max(c + k for s, (c, k) in logs.items() if s > 2 * FULL_EVERY)
    assert late <= early * 1.2, (early, late)  # flat, not growing with the run
    outputs = "FROM blobs WHERE text NOT LIKE '{\"kind\":\"context_item\"%'"  # (schema 9: long items are blobs too)
    assert conn.execute(f"SELECT count(*) {outputs}").fetchone()[0] == 1
    marker = "line 700: nothing unusual here"
    assert conn.execute("SELECT count(*) FROM steps WHERE context LIKE ?", (f"%{marker}%",)).fetchone()[0] == 0
    assert marker in conn.execute(f"SELECT text {outputs}").fetchone()[0]


def test_resume_from_a_change_log_row_reads_the_output_back(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.sqlite")
    run, states = _long_run(tmp_path, store, FULL_EVERY + 9)
    run.close()
    resumed = Run.resume(store, "R1", effects=CountingOutbox())
    assert resumed.resume_report is not None and resumed.resume_report.ok
    assert resumed.context.read_ref("ref_001") == BIG
    restored = {i: resumed.context.item(i).text for i in states[FULL_EVERY + 9]["live"]}
    assert restored == {d["id"]: d["text"] for d in states[FULL_EVERY + 9]["items"] if d["id"] in restored}
    assert resumed.context.view().items[0].role == "resume"
    resumed.step()
    assert store.last_step("R1") is not None and store.last_step("R1").step == FULL_EVERY + 10  # type: ignore[union-attr]
    resumed.close()


def test_history_lists_every_checkpoint(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.sqlite")
    run, _ = _long_run(tmp_path, store, 12)
    run.close()
    history = store.history("R1")
    assert [h.step for h in history] == list(range(13))
    assert history[5].id == "R1@5" and history[0].at <= history[-1].at


def test_a_schema_1_file_gains_the_blob_table_and_keeps_its_rows(tmp_path: Path) -> None:
    db = tmp_path / "old.sqlite"
    SQLiteStore(db).close()
    conn = sqlite3.connect(db)
    conn.execute("DROP TABLE blobs")
    conn.execute("UPDATE schema_version SET version = 1")
    conn.execute("INSERT INTO runs (run_id, spec, created_at) VALUES ('old', '{}', 1.0)")
    conn.commit()
    conn.close()
    store = SQLiteStore(db, create=False)
    assert store.run_ids() == ["old"]
    store.commit_step("old", 1, 2.0, "null", "{}", None, [("abc", "text")])
    assert store.blob("abc") == "text"
    store.close()
    assert sqlite3.connect(db).execute("SELECT version FROM schema_version").fetchone()[0] == SCHEMA_VERSION
