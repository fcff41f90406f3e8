"""Long context items are stored once (schema 9): a row names them by the sha256 of their text, kept in the
store's blobs, and every reader gets the states back as they were; a schema-8 file reads as it is,
migrates on a writable open and writes on."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from runhelpers import think_run

from harness_lab import Run
from harness_lab.errors import StoreError
from harness_lab.persistence import _context_rows
from harness_lab.persistence.checkpoint import FULL_EVERY
from harness_lab.persistence.resume import load_checkpoint
from harness_lab.proposers import FunctionProposer
from harness_lab.store import SQLiteStore

_NAMED = '"$sha256":'
_THOUGHTS = ({"kind": "think", "thought": "plan the next step"}, {"kind": "think", "thought": "check the budget"})


def _rows(db: Path) -> list[tuple[int, str | None]]:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT step, context FROM steps ORDER BY step").fetchall()


def _states(db: Path, run_id: str, steps: range) -> dict[int, object]:
    store = SQLiteStore(db, read_only=True)
    try:
        return {n: load_checkpoint(store, run_id, n)[1] for n in steps}
    finally:
        store.close()


def test_long_items_are_stored_once_and_whole_states_shrink(tmp_path: Path) -> None:
    steps = 3 * FULL_EVERY + 5
    sizes = {}
    for tag, least in (("named", _context_rows.SHARED_MIN), ("inline", 10**9)):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(_context_rows, "SHARED_MIN", least)
            store = SQLiteStore(db := tmp_path / f"{tag}.sqlite")
            run = think_run(tmp_path / f"ws-{tag}", store, "R1")
            goal = run.context.item("c1").text[:40]  # the system item (~830 B stored)
            for _ in range(steps):
                run.step()
            run.close()
            store.close()
        rows = _rows(db)
        wholes = [c for _, c in rows if c is not None and '"kind":"context_state"' in c]
        assert len(wholes) == 4  # steps 0, 16, 32, 48
        sizes[tag] = sum(map(len, wholes))
        with sqlite3.connect(db) as conn:
            items = conn.execute("SELECT count(*) FROM blobs WHERE text LIKE ?", (f"%{goal}%",)).fetchone()[0]
        if tag == "named":
            assert items == 1, "the system item's text is stored once"
            assert not any(goal in (c or "") for _, c in rows), "no row repeats it"
            assert all(_NAMED in c for c in wholes)
            named = _states(db, "R1", range(steps + 1))
        else:
            assert items == 0 and all(goal in c for c in wholes)
            inline = _states(db, "R1", range(steps + 1))
    assert named == inline, "every checkpoint reads back the same state"
    assert sizes["inline"] - sizes["named"] >= 4 * 600, sizes  # at least the system item, less its name, each time


def test_a_schema_8_file_reads_as_it_is_migrates_and_writes_on(tmp_path: Path) -> None:
    db = tmp_path / "runs.sqlite"
    with pytest.MonkeyPatch.context() as patch:  # rows as schema 8 wrote them: every item inline
        patch.setattr(_context_rows, "SHARED_MIN", 10**9)
        store = SQLiteStore(db)
        run = think_run(tmp_path / "ws", store, "R1")
        for _ in range(FULL_EVERY + 4):
            run.step()
        live = run.context.state(ref_texts=False)
        run.close()
        store.close()
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE schema_version SET version = 8")
    assert not any(_NAMED in (c or "") for _, c in _rows(db))
    old = _states(db, "R1", range(FULL_EVERY + 5))  # read-only: read as it is, not marked
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT version FROM schema_version").fetchone()[0] == 8
    store = SQLiteStore(db)
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT version FROM schema_version").fetchone()[0] == 9
    counter = iter(range(1, 10**9))
    run = Run.resume(store, "R1", proposer=FunctionProposer(lambda view: _THOUGHTS[next(counter) % 2]))
    assert run.resume_report is not None and run.resume_report.ok
    for _ in range(2 * FULL_EVERY):
        run.step()
    last = run.step_no
    run.close()
    store.close()
    assert any(_NAMED in (c or "") for n, c in _rows(db) if n > FULL_EVERY + 4), "new rows name long items"
    again = _states(db, "R1", range(last + 1))
    assert {n: again[n] for n in old} == old, "the old rows read the same after the migration"
    assert old[FULL_EVERY + 4]["live"] == live["live"]  # (rows leave fields at their default out)


def test_a_missing_item_blob_is_one_error_naming_the_item(tmp_path: Path) -> None:
    db = tmp_path / "runs.sqlite"
    store = SQLiteStore(db)
    run = think_run(tmp_path / "ws", store, "R1")
    for _ in range(3):
        run.step()
    run.close()
    store.close()
    with sqlite3.connect(db) as conn:
        conn.execute("""DELETE FROM blobs WHERE text LIKE '{"kind":"context_item","id":"c1",%'""")
    store = SQLiteStore(db, read_only=True)
    with pytest.raises(StoreError, match=r"checkpoint R1@2 .*item 'c1' by sha256 [0-9a-f]{12}") as caught:
        load_checkpoint(store, "R1", 2)
    assert "\n" not in str(caught.value)
    store.close()
