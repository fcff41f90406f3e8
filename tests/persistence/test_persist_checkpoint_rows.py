"""A checkpoint row leaves out what is at its default; reading it back gives every field as the run had it."""

from __future__ import annotations

from pathlib import Path

from persisthelpers import ACTIONS, CountingOutbox

from harness_lab import Run
from harness_lab.contract import load_contract
from harness_lab.evidence import EvidenceCatalogue
from harness_lab.loop.approval import AutoApprove
from harness_lab.paths import data_dir
from harness_lab.persistence.checkpoint import Checkpoint
from harness_lab.persistence.resume import load_checkpoint
from harness_lab.proposers import ScriptedProposer
from harness_lab.store import SQLiteStore


def _expected(run: Run, excluded: tuple[str, ...]) -> dict[str, object]:
    state = {k: v for k, v in run.capture(context=False).items() if k not in excluded}
    usage = run.usage.model_dump(mode="json", exclude={"kind"})
    return {"state": run.state, "run_state": state, "usage": usage, "completed_scope": tuple(sorted(run.executor.observed)),
            "step": run.step_no}


def _walk(tmp_path: Path, name: str, excluded: tuple[str, ...]) -> list[tuple[str, Checkpoint, dict[str, object]]]:
    store = SQLiteStore(tmp_path / f"{name}.sqlite")
    contract = load_contract(data_dir() / "contracts" / "report_task.yaml").with_budget(max_decisions=12, max_tool_calls=12)
    memory = contract.memory.model_copy(update={"exclude": (*contract.memory.exclude, *excluded)})
    seen = []
    with Run(contract=contract.model_copy(update={"memory": memory}), proposer=ScriptedProposer(ACTIONS),
             evidence=EvidenceCatalogue.from_dir(data_dir() / "evidence"), workspace=tmp_path / name,
             approver=AutoApprove(), effects=CountingOutbox(), run_id="R1", store=store) as run:
        while not run.state.terminal:
            run.step()
            row = store.step("R1", run.step_no).checkpoint
            seen.append((row, load_checkpoint(store, "R1", run.step_no)[0], _expected(run, excluded)))
    store.close()
    return seen


def test_every_checkpoint_reads_back_as_the_run_had_it_and_the_row_is_smaller(tmp_path: Path) -> None:
    for excluded in [(), ("observed", "pending", "state")]:  # a dropped entry is never filled in
        seen = _walk(tmp_path, "x" + "-".join(excluded), excluded)
        assert len(seen) == len(ACTIONS)
        for row, checkpoint, expected in seen:
            assert {name: getattr(checkpoint, name) for name in expected} == expected
            assert checkpoint.excluded == excluded
            full = checkpoint.model_dump_json()
            assert Checkpoint.model_validate_json(full) == checkpoint  # the full (schema 3) form reads the same
            assert len(row) < len(full)
        assert any(c.completed_scope for _, c, _ in seen) and any(c.verification for _, c, _ in seen)
        assert any(c.run_state.get("receipt") for _, c, _ in seen) or "receipt" in excluded
        assert all('"stop_reason":null' not in row and '"verification":null' not in row for row, _, _ in seen)
