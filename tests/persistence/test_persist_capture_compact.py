"""``Run.capture_compact()`` (a checkpoint row's run state) is ``capture(context=False)`` less the
state and the entries at their empty value, and a stored row reads back to the full capture."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from persisthelpers import ACTIONS, CountingOutbox, push_run

from harness_lab import Run
from harness_lab.loop.approval import AskHuman
from harness_lab.persistence.checkpoint import RUN_STATE_EMPTY, Checkpoint
from harness_lab.store import SQLiteStore


def _check(run: Run, seen: set[str]) -> None:
    compact, full = run.capture_compact(), run.capture(context=False)
    assert "state" not in compact and full["state"] == run.state.value
    assert list(full) == ["state", "stop_reason", "observed", "gates", "proposer", "receipt", "waiting", "pending", "repair",
                          "attempts"]
    for key, value in full.items():
        if key == "state":
            continue
        if key in compact:
            assert compact[key] == value and (key == "gates" or value != RUN_STATE_EMPTY[key]), key
            seen.add(key)
        else:
            assert value == RUN_STATE_EMPTY[key], f"{key} left out but not empty: {value!r}"
    assert full["observed"] is not run.executor.observed  # a copy, never the live dict


def test_compact_capture_is_the_capture_without_its_empty_entries(tmp_path: Path) -> None:
    seen: set[str] = set()
    with push_run(tmp_path / "ws", None, CountingOutbox()) as run:  # reads, a push, the report, finish
        _check(run, seen)
        while not run.state.terminal:
            run.step()
            _check(run, seen)
    gated = Run.from_scenario("conforming_report", workspace=tmp_path / "gated", approver=AskHuman())
    gated.contract = gated.contract.model_copy(update={"human_gate": gated.contract.human_gate.model_copy(
        update={"required_for": ("write_report",)})})
    with gated:
        gated.run()
        assert gated.waiting is not None  # parked: the waiting request and the pending proposal are held
        _check(gated, seen)
        gated.reject("not now")
        _check(gated, seen)
    assert seen >= {"observed", "gates", "receipt", "waiting", "pending", "stop_reason"}


def test_a_stored_row_reads_back_to_the_full_capture(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.sqlite")
    with push_run(tmp_path / "ws", store, CountingOutbox()) as run:
        captures: list[dict[str, Any]] = []
        for _ in range(len(ACTIONS)):
            run.step()
            captures.append(run.capture(context=False))
    for step, expected in enumerate(captures, start=1):
        stored = Checkpoint.from_row(store.step("R1", step))
        assert stored.run_state == expected, step
        row_state = json.loads(store.step("R1", step).checkpoint)["run_state"]
        assert "state" not in row_state and all(row_state[k] != RUN_STATE_EMPTY[k] for k in row_state if k != "gates")
    store.close()

