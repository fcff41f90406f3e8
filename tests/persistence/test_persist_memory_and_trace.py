"""Checkpoints never hold secrets (memory.exclude), the in-memory trace stays bounded, the CLI round-trips."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from persisthelpers import ACTIONS, CountingOutbox, push_run

from harness_lab import Run, RunState
from harness_lab.cli import main
from harness_lab.store import SQLiteStore

SECRET_ACTIONS = [
    {"kind": "write_file", "path": ".env", "content": "password=hunter2hunter2\nAWS=AKIAABCDEFGHIJKLMNOP\n"
                                                   "sk-abcdefghijklmnopqrstu\n"},  # a key right after a newline
    {"kind": "read_file", "path": ".env"},
    *ACTIONS,
]


def _all_bytes(db: Path) -> bytes:
    return b"".join(p.read_bytes() for p in db.parent.glob(db.name + "*"))


def test_secrets_never_reach_the_store(tmp_path: Path) -> None:
    db = tmp_path / "runs.sqlite"
    store = SQLiteStore(db)
    run = push_run(tmp_path / "ws", store, CountingOutbox(), actions=SECRET_ACTIONS)
    assert "secrets" in run.contract.memory.exclude
    run.run()
    store.close()
    data = _all_bytes(db)
    assert b"hunter2hunter2" not in data and b"AKIAABCDEFGHIJKLMNOP" not in data
    assert b"sk-abcdefghijklmnopqrstu" not in data
    assert b"[REDACTED]" in data
    assert (tmp_path / "ws" / ".env").read_text().startswith("password=hunter2"), "the workspace itself is untouched"


def test_without_the_exclusion_the_same_text_is_stored(tmp_path: Path) -> None:
    db = tmp_path / "runs.sqlite"
    store = SQLiteStore(db)
    run = push_run(tmp_path / "ws", None, CountingOutbox(), actions=SECRET_ACTIONS)
    contract = run.contract.model_copy(update={"memory": run.contract.memory.model_copy(update={"exclude": ()})})
    run = Run(contract=contract, proposer=run.proposer, evidence=run.evidence, workspace=tmp_path / "ws2",
              approver=run.approver, effects=CountingOutbox(), store=store)
    run.run()
    store.close()
    assert b"hunter2hunter2" in _all_bytes(db), "redaction is what keeps it out (this test would catch a no-op)"


def test_excluding_the_context_stores_none_and_resume_rebuilds_it(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.sqlite")
    base = push_run(tmp_path / "x", None, CountingOutbox())
    memory = base.contract.memory.model_copy(update={"exclude": (*base.contract.memory.exclude, "context")})
    run = Run(contract=base.contract.model_copy(update={"memory": memory}), proposer=base.proposer,
              evidence=base.evidence, workspace=tmp_path / "ws", approver=base.approver,
              effects=CountingOutbox(), store=store, run_id="R1")
    run.run(max_steps=3)
    assert all(s.context is None for s in store.steps("R1"))
    resumed = Run.resume(store, "R1", effects=CountingOutbox(), approver=base.approver)
    view = resumed.context.view().render()
    assert "Resumed from checkpoint R1@3" in view
    assert resumed.run() is RunState.REVIEW_READY


def test_trace_window_stays_bounded_with_a_store(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.sqlite")
    actions = [{"kind": "read_evidence", "id": i} for i in ("harness-boundary", "acceptance-snapshot", "budget-gates")]
    run = push_run(tmp_path / "ws", store, CountingOutbox(), actions=actions * 40, max_decisions=200)
    run.gates.repeat_limit = 10**6  # cycling three reads is the point here, not convergence
    assert run.checkpoints is not None
    run.checkpoints.window = 8
    run.run(max_steps=100)
    assert run.step_no == 100
    assert len(run.records) < 16 and len(run.events) < 16 * 16
    assert run.records[-1].step == 100
    assert len(store.steps("R1", start=0)) == 101  # the step-0 registration plus every step


def test_cli_run_trace_replay_resume(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "runs.sqlite")
    assert main(["run", "conforming_report", "--db", db, "--run-id", "R1", "--json"]) == 0
    final = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert final["final_state"] == "REVIEW_READY"
    assert main(["trace", "--db", db, "--run-id", "R1"]) == 0
    trace = capsys.readouterr().out.strip().splitlines()
    assert len(trace) == 4 and trace[-1].startswith("step 4: finish()")
    assert main(["replay", "--db", db, "--run-id", "R1"]) == 0
    assert capsys.readouterr().out.startswith("identical: 4 steps")
    assert main(["resume", "--db", db, "--run-id", "R1"]) == 0
    assert "resumed: trigger ok" in capsys.readouterr().err
