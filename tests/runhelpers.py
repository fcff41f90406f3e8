"""A run that never ends on its own: two different ``think`` calls, alternating (no convergence stop),
no human gate, budgets out of reach; the store's no-op loop (as bench/step_overhead.py's ``noop_run``);
and an outside world that counts what it applies. Given no store, the no-store step of bench/core_targets.py."""

from __future__ import annotations

from pathlib import Path

from harness_lab import Run
from harness_lab.contract import load_contract
from harness_lab.evidence import EvidenceCatalogue
from harness_lab.loop.approval import AutoApprove
from harness_lab.paths import data_dir
from harness_lab.proposers.scripted import FunctionProposer
from harness_lab.records.actions import GatedAction
from harness_lab.records.tools import ToolResult
from harness_lab.store import Store


def think_run(workspace: Path, store: Store | None, run_id: str) -> Run:
    contract = load_contract(data_dir() / "contracts" / "report_task.yaml").with_budget(
        max_decisions=10**6, max_tool_calls=10**6, max_tokens=None, wall_clock_seconds=None)
    contract = contract.model_copy(update={"human_gate": contract.human_gate.model_copy(update={"required_for": ()})})
    thoughts = ({"kind": "think", "thought": "plan the next step"}, {"kind": "think", "thought": "check the budget"})
    counter = iter(range(10**9))
    return Run(contract=contract, proposer=FunctionProposer(lambda view: thoughts[next(counter) % 2]),
               evidence=EvidenceCatalogue.from_dir(data_dir() / "evidence"), workspace=workspace,
               approver=AutoApprove(), run_id=run_id, store=store)


class CountingOutbox:
    """An outside world that counts every application (an idempotency key seen twice is a double effect)."""

    def __init__(self) -> None:
        self.applied: list[str] = []

    def apply(self, action: GatedAction, idempotency_key: str) -> ToolResult:
        self.applied.append(idempotency_key)
        return ToolResult.success(action.kind, f"{action.kind} applied", key=idempotency_key)
