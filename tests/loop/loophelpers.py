"""Shared helpers for the loop tests (gates, human gate, faults, scheduler, repair)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness_lab import Run
from harness_lab.clock import Clock
from harness_lab.contract import ControlContract, load_contract
from harness_lab.evidence import EvidenceCatalogue
from harness_lab.paths import data_dir
from harness_lab.proposers import ScriptedProposer

GOOD = (data_dir() / "reports" / "conforming.md").read_text(encoding="utf-8")
READ_A = {"kind": "read_evidence", "id": "harness-boundary"}
READ_B = {"kind": "read_evidence", "id": "acceptance-snapshot"}
READ_C = {"kind": "read_evidence", "id": "budget-gates"}
READ_D = {"kind": "read_evidence", "id": "semantic-review"}
WRITE_GOOD = {"kind": "write_report", "text": GOOD}
FINISH = {"kind": "finish"}
CONFORMING = [READ_A, READ_B, WRITE_GOOD, FINISH]


def contract(**budget: Any) -> ControlContract:
    base = load_contract(data_dir() / "contracts" / "report_task.yaml")
    limits = {"max_decisions": 20, "max_tool_calls": 20, **budget}
    return base.with_budget(**limits)


def evidence() -> EvidenceCatalogue:
    return EvidenceCatalogue.from_dir(data_dir() / "evidence")


def make_run(tmp_path: Path, actions: list[Any], *, then: str = "repeat_last", name: str = "ws",
             contract_: ControlContract | None = None, clock: Clock | None = None, **kw: Any) -> Run:
    return Run(contract=contract_ or contract(), evidence=evidence(),
               proposer=ScriptedProposer(actions, then=then),  # type: ignore[arg-type]
               workspace=tmp_path / name, clock=clock, **kw)


def notes(record: Any, topic: str) -> list[Any]:
    return [e for e in record.events if e.kind == "note" and e.topic == topic]
