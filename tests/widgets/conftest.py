"""Runs for the widget tests: shipped scenarios, a human-gate script, a long run."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness_lab import EvidenceCatalogue, FakeClock, FunctionProposer, Run, ScriptedProposer, load_contract
from harness_lab.paths import data_dir

GATED_SCRIPT: list[dict[str, Any]] = [
    {"kind": "read_evidence", "id": "harness-boundary"},
    {"kind": "push", "remote": "origin", "branch": "main"},
    {"kind": "read_evidence", "id": "acceptance-snapshot"},
]


@pytest.fixture
def make_run(tmp_path: Path) -> Callable[..., Run]:
    """A run over a scripted proposer (or a shipped scenario) in a fresh workspace under tmp_path."""
    count = iter(range(1000))

    def make(actions: list[Any] | None = None, *, scenario: str | None = None, **budget: int) -> Run:
        ws = tmp_path / f"ws{next(count)}"
        if scenario is not None:
            return Run.from_scenario(scenario, workspace=ws, clock=FakeClock())
        contract = load_contract(data_dir() / "contracts" / "report_task.yaml")
        if budget:
            contract = contract.with_budget(**budget)
        return Run(contract=contract, proposer=ScriptedProposer(actions or GATED_SCRIPT, then="finish"),
                   evidence=EvidenceCatalogue.from_dir(data_dir() / "evidence"), workspace=ws, clock=FakeClock())

    return make


@pytest.fixture
def long_run(tmp_path: Path) -> Run:
    """A run of a few hundred varied tool calls (writes overwrite files, so snapshots pile up)."""
    ids = ["harness-boundary", "budget-gates", "acceptance-snapshot", "semantic-review"]

    def propose(view: object) -> dict[str, Any]:
        propose.n += 1  # type: ignore[attr-defined]
        i = propose.n  # type: ignore[attr-defined]
        if i % 2:
            return {"kind": "write_file", "path": f"notes/n{i % 7}.txt", "content": f"note {i}"}
        return {"kind": "read_evidence", "id": ids[i % 4]}

    propose.n = 0  # type: ignore[attr-defined]
    contract = load_contract(data_dir() / "contracts" / "report_task.yaml").with_budget(
        max_decisions=400, max_tool_calls=400, max_tokens=None)
    return Run(contract=contract, proposer=FunctionProposer(propose),
               evidence=EvidenceCatalogue.from_dir(data_dir() / "evidence"), workspace=tmp_path / "long",
               clock=FakeClock())
