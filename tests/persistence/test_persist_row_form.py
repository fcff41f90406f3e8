"""A checkpoint of the row form (schema 6) leaves out what its row's columns and step record hold;
``Checkpoint.from_row`` reads it, and rows of the older forms, to the checkpoint the run had."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from persisthelpers import ACTIONS, CountingOutbox, push_run
from runhelpers import think_run

from harness_lab import Run
from harness_lab.contract import load_contract
from harness_lab.evidence import EvidenceCatalogue
from harness_lab.loop.approval import AskHuman
from harness_lab.paths import data_dir
from harness_lab.persistence.checkpoint import ROW_FORM, Checkpoint, _next_step
from harness_lab.proposers import ScriptedProposer
from harness_lab.store import SQLiteStore, StoredStep


def _as_schema_5(row: StoredStep) -> StoredStep:
    """The row as schema 4-5 wrote it: every field in the text, kind "checkpoint"."""
    data = json.loads(row.checkpoint)
    record = json.loads(row.record)
    full: dict[str, Any] = {"kind": "checkpoint", "run_id": row.run_id, "step": row.step,
                            "seq": data.get("seq", record and record["events"][-1]["seq"])}
    full.update({k: v for k, v in data.items() if k not in ("kind", "seq")})
    full.setdefault("next_step", f"step {row.step + 1}: ask the proposer")
    full.setdefault("usage", record and record["usage"])
    text = json.dumps(full, separators=(",", ":"))
    return StoredStep(row.run_id, row.step, row.at, row.record, text, row.context)


def test_a_row_form_checkpoint_reads_back_as_the_run_had_it(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.sqlite")
    expected = []
    with push_run(tmp_path / "ws", store, CountingOutbox()) as run:
        expected.append((0, 0, run.usage, _next_step(run)))
        while not run.state.terminal:
            run.step()
            expected.append((run.step_no, run.events[-1].seq, run.usage, _next_step(run)))
        version = run.contract.version
    assert len(expected) > 3
    for step, seq, usage, next_step in expected:
        row = store.step("R1", step)
        assert row.checkpoint.startswith(f'{{"kind":"{ROW_FORM}"')
        checkpoint = Checkpoint.from_row(row)
        assert (checkpoint.run_id, checkpoint.step, checkpoint.seq, checkpoint.contract_version) == ("R1", step, seq, version)
        assert checkpoint.usage == usage.model_dump(mode="json", exclude={"kind"}), step
        assert checkpoint.next_step == next_step
        text = json.loads(row.checkpoint)
        assert "run_id" not in text and "step" not in text
        if step > 0:  # the row's step record holds the usage and the last event's seq
            assert "usage" not in text and "seq" not in text
        assert ("next_step" in text) == next_step.startswith("none")  # the usual next step is derived
        assert Checkpoint.from_row(_as_schema_5(row)) == checkpoint  # the older form reads the same
    store.close()


def test_a_row_of_the_row_form_without_its_record_is_refused_not_misread(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.sqlite")
    with push_run(tmp_path / "ws", store, CountingOutbox()) as run:
        run.step()
    row = store.step("R1", 1)
    store.close()
    for record in ("null", '{"usage":{},"events":[]}'):
        try:
            Checkpoint.from_row(StoredStep(row.run_id, row.step, row.at, record, row.checkpoint, row.context))
        except (KeyError, TypeError, ValueError):  # ValueError: a record not of its form
            continue
        raise AssertionError(f"read a row-form checkpoint from a record without its seq: {record}")


def test_a_parked_run_s_next_step_is_written_not_derived(tmp_path: Path) -> None:
    contract = load_contract(data_dir() / "contracts" / "report_task.yaml").with_budget(max_decisions=12, max_tool_calls=12)
    contract = contract.model_copy(update={"human_gate": contract.human_gate.model_copy(update={"required_for": ("write_report",)})})
    store = SQLiteStore(tmp_path / "s.sqlite")
    with Run(contract=contract, proposer=ScriptedProposer(ACTIONS), evidence=EvidenceCatalogue.from_dir(data_dir() / "evidence"),
             workspace=tmp_path / "ws", approver=AskHuman(), effects=CountingOutbox(), run_id="R1", store=store) as run:
        run.run()
        assert run.waiting is not None
        row = store.last_step("R1")
        assert row is not None and row.step == run.step_no
        assert Checkpoint.from_row(row).next_step == _next_step(run) == "approve() or reject(reason) the parked proposal"
        assert "next_step" in json.loads(row.checkpoint)
    store.close()


def test_a_loop_row_leaves_out_the_gates_usual_values_and_reads_them_back(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.sqlite")
    captured = []
    with think_run(tmp_path / "ws", store, "R1") as run:
        for _ in range(40):
            run.step()
            captured.append((run.step_no, run.capture(context=False)))
        checkpointer = run.checkpoints
        assert checkpointer is not None
        # a gates state off the usual: every entry is written
        gates = {"recent": ["{}"], "hinted": True, "warned": False, "last_decision": 5}
        held = checkpointer._run_state({"gates": gates}, 7)
        assert held == {"gates": {k: v for k, v in gates.items() if k != "warned"}}
    for step, expected in captured:
        row = store.step("R1", step)
        assert '"gates":{"recent":[' in row.checkpoint
        assert not any(k in row.checkpoint for k in ('"hinted"', '"warned"', '"last_decision"'))
        assert Checkpoint.from_row(row).run_state == expected, step
    store.close()
