"""memory.persist decides what a checkpoint keeps; resume says what it did not get; names are validated."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness_lab import Run
from harness_lab.contract import PERSIST_CATEGORIES, ControlContract, Memory, load_contract
from harness_lab.errors import ConfigError
from harness_lab.evidence import EvidenceCatalogue
from harness_lab.paths import data_dir
from harness_lab.persistence.checkpoint import ALWAYS_KEPT, PERSISTED, Checkpoint
from harness_lab.proposers import ScriptedProposer
from harness_lab.store import SQLiteStore

GOOD = (data_dir() / "reports" / "conforming.md").read_text(encoding="utf-8")
BAD = GOOD.replace("## Limitations\nTest material only.\n", "")
# read, read, a failed draft (verification, failure, attempts), a fixed draft; stopped before its finish
ACTIONS: list[dict[str, Any]] = [
    {"kind": "read_evidence", "id": "harness-boundary"}, {"kind": "read_evidence", "id": "acceptance-snapshot"},
    {"kind": "write_report", "text": BAD}, {"kind": "finish"}, {"kind": "write_report", "text": GOOD}, {"kind": "finish"},
]
STOP_AT = 5


def _contract(persist: tuple[str, ...] | None) -> ControlContract:
    base = load_contract(data_dir() / "contracts" / "report_task.yaml").with_budget(max_tokens=None, wall_clock_seconds=None)
    if persist is None:
        return base
    return base.model_copy(update={"memory": Memory(persist=persist, exclude=base.memory.exclude)})


def _stopped(tmp_path: Path, persist: tuple[str, ...] | None, name: str) -> tuple[SQLiteStore, dict[str, Any], Checkpoint]:
    store = SQLiteStore(tmp_path / f"{name}.sqlite")
    run = Run(contract=_contract(persist), proposer=ScriptedProposer(ACTIONS),
              evidence=EvidenceCatalogue.from_dir(data_dir() / "evidence"), workspace=tmp_path / name,
              run_id="M1", store=store)
    run.run(max_steps=STOP_AT)
    run.close()
    row = store.step("M1", STOP_AT)
    return store, json.loads(row.checkpoint), Checkpoint.from_row(row)


def test_persist_empty_keeps_only_what_resume_strictly_needs(tmp_path: Path) -> None:
    # The checkpoint was identical with `persist: []`: nothing read the field.
    _, full, _ = _stopped(tmp_path, None, "full")
    store, bare, checkpoint = _stopped(tmp_path, (), "bare")
    assert {"completed_scope", "verification", "failure_root_cause", "pending"} <= full.keys()
    assert {"observed", "gates", "proposer", "attempts"} <= full["run_state"].keys()
    assert not {"completed_scope", "verification", "failure_root_cause", "pending", "next_step"} & bare.keys()
    assert bare["run_state"] == {}
    assert checkpoint.not_persisted == tuple(PERSIST_CATEGORIES) and "not_persisted" not in full
    assert {"contract_version", "state", "workspace_hash", "artifact_sha256"} <= bare.keys()
    assert all(row.context is None for row in store.steps("M1", start=0)), "the context layers are not written"
    assert len(store.step("M1", STOP_AT).checkpoint) < len(json.dumps(full)) / 2
    assert set(ALWAYS_KEPT) >= {"usage", "receipt", "waiting"}


@pytest.mark.parametrize("left_out", list(PERSIST_CATEGORIES))
def test_each_category_leaves_out_exactly_its_own_fields(tmp_path: Path, left_out: str) -> None:
    _, full, _ = _stopped(tmp_path, None, "full")
    _, row, checkpoint = _stopped(tmp_path, tuple(c for c in PERSIST_CATEGORIES if c != left_out), "part")
    fields, state = PERSISTED[left_out]
    assert checkpoint.not_persisted == (left_out,)
    assert {k for k in full if k != "next_step"} - row.keys() == set(fields) - {"next_step"}
    held = full["run_state"].keys()  # (no repair policy in this run: no 'repair' entry to leave out)
    assert held - row["run_state"].keys() == {k for k in state if k in held} != set() or left_out == "next_action"
    assert set(state) <= set(checkpoint.excluded)


def test_a_resume_says_what_was_not_persisted(tmp_path: Path) -> None:
    store, _, _ = _stopped(tmp_path, ("failures", "next_action"), "part")
    run = Run.resume(store, "M1")
    assert run.resume_report is not None and all(c.ok for c in run.resume_report.checks)
    memory = next(c for c in run.resume_report.checks if c.name == "memory")
    assert memory.detail.startswith("not persisted by the contract's memory.persist, so not restored: current_scope")
    assert "decisions (the proposer's state" in memory.detail and "failures" not in memory.detail
    assert not run.executor.observed, "the evidence read was not kept: none counts as read"
    # decisions were not kept: the script starts again (reads first); the budget spent stays spent
    record = run.step()
    assert record.proposal is not None and record.proposal.raw == ACTIONS[0] and run.usage.decisions == STOP_AT + 1
    run.close()
    full_store, _, _ = _stopped(tmp_path, None, "full")
    full = Run.resume(full_store, "M1")
    assert full.resume_report is not None and [c.name for c in full.resume_report.checks] == [
        "trigger", "workspace", "scope", "prechecks", "harness"]
    full.close()


@pytest.mark.parametrize(("field", "value", "message"), [
    ("persist", "[current_scope, decision]", "'decision' is no persist category, so nothing would be kept by it; "
                                             "did you mean 'decisions'?"),
    ("exclude", "[secrets, raw_credential]", "'raw_credential' is no secret category nor run-state entry, so nothing "
                                             "would be excluded by it; did you mean 'raw_credentials'?"),
])
def test_an_unknown_memory_name_is_one_line(tmp_path: Path, field: str, value: str, message: str) -> None:
    text = (data_dir() / "contracts" / "report_task.yaml").read_text(encoding="utf-8")
    line = next(line for line in text.splitlines() if line.startswith(f"  {field}: "))
    bad = tmp_path / "c.yaml"
    bad.write_text(text.replace(line, f"  {field}: {value}"), encoding="utf-8")
    with pytest.raises(ConfigError, match=f"field memory.{field}: ") as caught:
        load_contract(bad)
    assert message in str(caught.value) and "\n" not in str(caught.value)
