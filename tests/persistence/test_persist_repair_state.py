"""The repair policy survives a kill: its configuration is in the run's spec, its state (failures,
rollback, healthy snapshot, history) in each checkpoint row; resume and fork rebuild it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness_lab import Run
from harness_lab.contract import load_contract
from harness_lab.evidence import EvidenceCatalogue
from harness_lab.loop.repair import RepairPolicy
from harness_lab.paths import data_dir
from harness_lab.proposers import ScriptedProposer
from harness_lab.records.states import RunState
from harness_lab.store import SQLiteStore

GOOD = (data_dir() / "reports" / "conforming.md").read_text(encoding="utf-8")
BAD = GOOD.replace("## Limitations\nTest material only.\n", "")
ACTIONS: list[dict[str, Any]] = [
    {"kind": "read_evidence", "id": "harness-boundary"},
    {"kind": "read_evidence", "id": "acceptance-snapshot"},
    {"kind": "write_report", "text": BAD},
    {"kind": "finish"},  # then: finish again, and again
]


def _run(workspace: Path, store: SQLiteStore, repair: RepairPolicy | None, run_id: str = "R1") -> Run:
    contract = load_contract(data_dir() / "contracts" / "report_task.yaml").with_budget(
        max_decisions=20, max_tool_calls=20)
    return Run(contract=contract, proposer=ScriptedProposer(ACTIONS), workspace=workspace, run_id=run_id,
               evidence=EvidenceCatalogue.from_dir(data_dir() / "evidence"), repair=repair, store=store)


def _fail_once(tmp_path: Path, repair: RepairPolicy | None) -> Path:
    db = tmp_path / "runs.sqlite"
    store = SQLiteStore(db)
    run = _run(tmp_path / "ws", store, repair)
    run.run(max_steps=4)
    assert run.records[-1].verdict is not None and not run.records[-1].verdict.accepted
    assert run.state is RunState.RUNNING
    run.close()
    store.close()
    del run, store  # the "kill": nothing of the process is left but the database and the workspace
    return db


def test_a_resumed_run_keeps_its_failure_count_and_escalates_at_the_next_failure(tmp_path: Path) -> None:
    db = _fail_once(tmp_path, RepairPolicy(max_retries=1))
    store = SQLiteStore(db, create=False)
    run = Run.resume(store, "R1")
    assert run.resume_report is not None and run.resume_report.ok
    assert run.repair is not None and run.repair.max_retries == 1
    assert run.repair.failures == 1 and [s.action for s in run.repair.history] == ["retry"]
    record = run.step()  # finish again: the second failure, over the cap of 1
    assert record.verdict is not None and not record.verdict.accepted
    assert run.state is RunState.BLOCKED and run.stop_reason is not None
    assert run.stop_reason.code == "escalated", "a fresh policy would have retried again"
    # The healthy snapshot lived in the dead process's sandbox: no rollback to it, and the note says why.
    assert [s.action for s in run.repair.history] == ["retry", "escalate"]
    assert "did not survive" in run.repair.history[-1].note
    run.close()
    store.close()


def test_the_count_carries_on_over_two_restarts(tmp_path: Path) -> None:
    db = _fail_once(tmp_path, RepairPolicy(max_retries=3))
    for failure in (2, 3):
        store = SQLiteStore(db, create=False)
        run = Run.resume(store, "R1")
        run.step()
        assert run.repair is not None and run.repair.history[-1].note.startswith(f"retry {failure}/3:")
        run.close()
        store.close()
    store = SQLiteStore(db, create=False)
    run = Run.resume(store, "R1")
    assert run.repair is not None and run.repair.healthy is None and run.repair.healthy_lost is not None
    run.step()  # the 4th failure: the healthy snapshot is gone with the first process: escalate
    assert run.stop_reason is not None and run.stop_reason.code == "escalated"
    run.close()
    store.close()


def test_the_spec_holds_the_configuration_and_the_row_the_state(tmp_path: Path) -> None:
    db = _fail_once(tmp_path, RepairPolicy(max_retries=2))
    store = SQLiteStore(db, create=False)
    assert store.run_info("R1").spec["repair"] == {"max_retries": 2}
    rows = [json.loads(store.step("R1", n).checkpoint)["run_state"] for n in range(5)]
    assert all("repair" not in row for row in rows[:3]), "an untouched policy costs nothing in the row"
    assert rows[3]["repair"]["healthy"] is not None and rows[3]["repair"]["failures"] == 0
    assert rows[4]["repair"]["failures"] == 1 and rows[4]["repair"]["history"][0]["action"] == "retry"
    store.close()


def test_a_run_without_repair_and_rows_without_its_entry_resume_without_repair(tmp_path: Path) -> None:
    db = _fail_once(tmp_path, None)
    store = SQLiteStore(db, create=False)
    assert store.run_info("R1").spec["repair"] is None
    run = Run.resume(store, "R1")
    assert run.repair is None
    run.step()
    assert run.state is RunState.RUNNING and not any(e.kind == "note" and e.topic == "repair" for e in run.events)
    run.close()
    store.close()


def test_an_old_spec_without_the_repair_entry_still_loads(tmp_path: Path) -> None:
    # A store written before the spec held the policy: resumed as before, with no repair.
    db = _fail_once(tmp_path, RepairPolicy(max_retries=1))
    store = SQLiteStore(db, create=False)
    spec = dict(store.run_info("R1").spec)
    del spec["repair"]
    store._db.execute("UPDATE runs SET spec = ? WHERE run_id = 'R1'", (json.dumps(spec),))
    # nor did its first row bind the spec (its sha256 and workspace)
    first = store.step("R1", 0).checkpoint
    unbound = first.replace(first[first.index(',"spec_sha256":'):-1], "")
    store._db.execute("UPDATE steps SET checkpoint = ? WHERE checkpoint = ?", (unbound, first))
    run = Run.resume(store, "R1")
    assert run.resume_report is not None and run.resume_report.ok and run.repair is None
    run.close()
    store.close()


def test_a_fork_from_a_checkpoint_takes_the_policy_and_its_state(tmp_path: Path) -> None:
    db = _fail_once(tmp_path, RepairPolicy(max_retries=1))
    store = SQLiteStore(db, create=False)
    run = Run.resume(store, "R1")
    fork = run.fork("R1@4", new_run_id="F1", workspace=tmp_path / "fork")
    assert fork.repair is not None and fork.repair is not run.repair
    assert fork.repair.max_retries == 1 and fork.repair.failures == 1
    assert store.run_info("F1").spec["repair"] == {"max_retries": 1}
    fork.step()
    assert fork.stop_reason is not None and fork.stop_reason.code == "escalated"
    assert run.repair is not None and run.repair.failures == 1, "the source's policy is untouched"
    for r in (fork, run):
        r.close()
    store.close()
