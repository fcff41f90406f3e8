"""Schema 8: a step row's checkpoint holds what changed since the row before (orjson), on the whole one
of the row its ``base`` column names; every reader is handed the fold, whole. Files of schema <= 7 gain
the column on open and their rows read as they are."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import orjson
import pytest
from persisthelpers import CountingOutbox, push_run
from runhelpers import think_run

from harness_lab import Run
from harness_lab.checkpoint import FULL_EVERY
from harness_lab.errors import StoreError
from harness_lab.loop.approval import AutoApprove
from harness_lab.store import SCHEMA_VERSION, InMemoryStore, SQLiteStore, Store


def _written(store: Store, workspace: Path, steps: int) -> dict[int, Any]:
    """The whole checkpoint the writer built for each step, as plain JSON data."""
    out = {}
    with think_run(workspace, store, "R1") as run:
        for _ in range(steps):
            run.step()
            assert run.checkpoints is not None and run.checkpoints._last is not None
            out[run.step_no] = json.loads(orjson.dumps(run.checkpoints._last))
    return out


@pytest.mark.parametrize("kind", ["sqlite", "memory"])
def test_every_step_of_a_loop_reads_back_whole_alone_and_in_a_range(tmp_path: Path, kind: str) -> None:
    store: Store = SQLiteStore(tmp_path / "s.sqlite") if kind == "sqlite" else InMemoryStore()
    written = _written(store, tmp_path / "ws", 2 * FULL_EVERY + 5)
    for step, data in written.items():  # mid-span steps too: the fold reads from their base row
        assert json.loads(store.step("R1", step).checkpoint) == data, step
    assert {row.step: json.loads(row.checkpoint) for row in store.steps("R1")} == written
    last = store.last_step("R1")
    assert last is not None and json.loads(last.checkpoint) == written[max(written)]
    store.close()


def test_a_loops_delta_rows_hold_only_what_changed(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.sqlite")
    _written(store, tmp_path / "ws", 2 * FULL_EVERY + 5)
    store.close()
    rows = sqlite3.connect(tmp_path / "s.sqlite").execute("SELECT step, base, checkpoint FROM steps ORDER BY id").fetchall()
    whole = [step for step, base, text in rows if base == step]
    assert whole == [0, FULL_EVERY, 2 * FULL_EVERY]  # the rows the context is whole in
    for step, base, text in rows:
        if base != step:
            assert base == max(w for w in whole if w < step)
            if step == 1:  # the run started: its state moved, the first row's spec binding is gone
                assert set(json.loads(text)) == {"state", "run_state", "-"}, text
                continue
            assert set(json.loads(text)) == {"run_state"}, text  # the gates' recent calls, nothing else
            assert "contract_version" not in text and len(text) < 200


def test_a_delta_whose_base_row_holds_no_whole_checkpoint_is_refused_in_one_line(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.sqlite")
    _written(store, tmp_path / "ws", 5)
    store._db.execute("UPDATE steps SET checkpoint = ? WHERE step = 0", ('{"state":"RUNNING"}',))
    with pytest.raises(StoreError) as err:
        store.step("R1", 3)
    assert str(err.value) == "checkpoint R1@3 is unreadable: row 0, its base, holds no whole checkpoint"
    store._db.execute("DELETE FROM steps WHERE step = 1")
    with pytest.raises(StoreError, match=r"^checkpoint R1@3 is unreadable: the rows 0\.\.2 its delta builds on are"):
        store.step("R1", 3)
    store.close()


def test_a_schema_7_file_reads_as_it_is_and_gains_the_base_column_when_written(tmp_path: Path) -> None:
    db = tmp_path / "old.sqlite"
    store = SQLiteStore(db)
    with push_run(tmp_path / "ws", store, CountingOutbox(), max_decisions=30) as run:
        for _ in range(3):
            run.step()
        whole = {row.step: row.checkpoint for row in store.steps("R1", start=0)}
    store.close()
    conn = sqlite3.connect(db)  # as schema 7 wrote it: whole checkpoints, no base column
    for step, text in whole.items():
        conn.execute("UPDATE steps SET checkpoint = ? WHERE step = ?", (text, step))
    conn.execute("ALTER TABLE steps DROP COLUMN base")
    conn.execute("UPDATE schema_version SET version = 7")
    conn.commit()
    conn.close()
    reader = SQLiteStore(db, read_only=True)
    assert {row.step: row.checkpoint for row in reader.steps("R1", start=0)} == whole
    reader.close()
    store = SQLiteStore(db, create=False)
    resumed = Run.resume(store, "R1", effects=CountingOutbox(), approver=AutoApprove())
    for _ in range(3):
        resumed.step()
    rows = sqlite3.connect(db).execute("SELECT step, base, checkpoint FROM steps ORDER BY step").fetchall()
    assert sqlite3.connect(db).execute("SELECT version FROM schema_version").fetchone()[0] == SCHEMA_VERSION == 9
    assert [base for _, base, _ in rows[:4]] == [None] * 4  # the old rows, as they were
    assert rows[4][1] == 4 and rows[5][1] == 4 and not rows[5][2].startswith('{"kind"')  # a delta on the resumed row
    assert {row.step: row.checkpoint for row in store.steps("R1", start=0) if row.step <= 3} == whole
    assert json.loads(store.step("R1", 6).checkpoint)["contract_version"] == json.loads(whole[3])["contract_version"]
    resumed.close()
    store.close()
