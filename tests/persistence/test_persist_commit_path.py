"""The store's write path per step: the statements a step runs, and the ledger settled by the step's row."""

from __future__ import annotations

from pathlib import Path

import pytest
from persisthelpers import PUSH_STEP, CountingOutbox, push_run

from harness_lab.errors import StoreError
from harness_lab.store import EffectEntry, InMemoryStore, SQLiteStore, Store


def _statements(store: SQLiteStore, run_step: object) -> list[str]:
    """The statements the store's connection runs during ``run_step()`` (BEGIN and COMMIT included)."""
    seen: list[str] = []
    store._db.set_trace_callback(lambda sql: seen.append(" ".join(sql.split()[:3])))
    try:
        assert callable(run_step)
        run_step()
    finally:
        store._db.set_trace_callback(None)
    return seen


def test_a_step_runs_one_insert_and_an_effect_step_one_more_for_its_intent(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.sqlite")
    # A short read (an item under SHARED_MIN: a long one would add its blob to the row's transaction)
    actions = [{"kind": "write_file", "path": "notes/plan.txt", "content": "draft the report, then push"},
               {"kind": "read_file", "path": "notes/plan.txt"},
               {"kind": "write_file", "path": "notes/plan.txt", "content": "pushing"},
               {"kind": "push", "ref": "main"}, {"kind": "finish"}]
    with push_run(tmp_path / "ws", store, CountingOutbox(), actions=actions) as run:
        run.step()  # the first step after the run's registering row (looks up the run's number once)
        # A read: its row, one autocommitted INSERT (one transaction); no read, no ledger update.
        assert _statements(store, run.step) == ["INSERT INTO steps"]
        run.step()  # write_file: its files go in the row's transaction
        assert run.step_no == PUSH_STEP - 1
        # The push: the intent, durable before the effect runs, then the row, which settles it: no
        # BEGIN ... UPDATE effects ... COMMIT around the row.
        assert _statements(store, run.step) == ["INSERT OR IGNORE", "INSERT INTO steps"]
        assert [e.status for e in store.effects("R1", PUSH_STEP)] == ["committed"]
    store.close()


@pytest.mark.parametrize("kind", ["sqlite", "memory"])
def test_an_intent_reads_committed_once_its_steps_row_is(tmp_path: Path, kind: str) -> None:
    store: Store = SQLiteStore(tmp_path / "runs.sqlite") if kind == "sqlite" else InMemoryStore()
    store.commit_step("R1", 0, 0.0, "null", "{}", None, register={"kind": "run_spec"})
    for key, step in (("k1", 1), ("k2", 1), ("k3", 1), ("k4", 2)):
        assert store.record_intent(EffectEntry(key, "R1", step, "push", "intent")) is None
    store.set_effect_status("k2", "uncertain")  # as a resume judges an intent it cannot check
    store.set_effect_status("k3", "resolved")  # ... and one it redid
    assert {e.key: e.status for e in store.effects("R1")} == {"k1": "intent", "k2": "uncertain", "k3": "resolved",
                                                              "k4": "intent"}
    store.commit_step("R1", 1, 1.0, "null", "{}", None)
    settled = {"k1": "committed", "k2": "uncertain", "k3": "committed", "k4": "intent"}
    assert {e.key: e.status for e in store.effects("R1")} == settled
    assert [e.key for e in store.effects("R1", 1)] == ["k1", "k2", "k3"]
    assert {k: getattr(store.effect(k), "status", None) for k in settled} == settled
    again = store.record_intent(EffectEntry("k1", "R1", 1, "push", "intent"))  # a key applied before
    assert again is not None and again.status == "committed"
    if isinstance(store, SQLiteStore):  # a reader of the file sees the same
        reader = SQLiteStore(tmp_path / "runs.sqlite", read_only=True)
        assert {e.key: e.status for e in reader.effects("R1")} == settled
        reader.close()
    store.close()


def test_an_intents_detail_with_a_lone_surrogate_is_kept_as_written(tmp_path: Path) -> None:
    """orjson refuses a lone surrogate (a path decoded from bytes that are not UTF-8): the standard library writes it."""
    store = SQLiteStore(tmp_path / "runs.sqlite")
    store.commit_step("R1", 0, 0.0, "null", "{}", None, register={"kind": "run_spec"})
    detail = {"kind": "write_file", "path": "notes/\udcff.txt", "pre": {"notes": None, "notes/\udcff.txt": None}}
    assert store.record_intent(EffectEntry("k1", "R1", 1, "write_file", "intent", detail)) is None
    entry = store.effect("k1")
    assert entry is not None and entry.detail == detail
    store.close()


def test_registering_a_taken_run_id_is_refused_by_the_insert_with_nothing_written(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.sqlite")
    store.commit_step("R1", 0, 0.0, "null", "{}", None, register={"kind": "run_spec"})
    seen: list[str] = []
    store._db.set_trace_callback(seen.append)
    with pytest.raises(StoreError, match=r"run id 'R1' exists already; resume it or choose another id$"):
        store.commit_step("R1", 0, 1.0, "null", "{}", None, register={"kind": "other"})
    store._db.set_trace_callback(None)
    assert not any(sql.startswith("SELECT") for sql in seen)  # no read first: the UNIQUE key refuses it
    assert store.run_info("R1").spec == {"kind": "run_spec"} and [h.step for h in store.history("R1")] == [0]
    store.close()
