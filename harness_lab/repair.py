"""Repair after a failed verification (seed 003, 5.3): retry, then roll back, then escalate.

``Run(repair=RepairPolicy())`` turns it on; it is off by default, because seed 004's ten-scenario
table measures plain feedback loops. With it on, each failed finish is answered by one
:class:`RepairStep`:

1. failures 1 .. ``max_retries`` (by default the contract's ``verification.max_repairs``, 3 in the
   shipped contract): *retry* -- the reasons are fed back, the proposer tries again;
2. the next failure: *rollback* -- the workspace, run state and context return to the last healthy
   snapshot (taken before the first draft of the artifact) and a note says "approach X failed
   because Y; try a different approach";
3. a failure after the rollback: *escalate* -- the run stops BLOCKED with code ``escalated`` and a
   report of what was tried and why it failed, for a person to decide.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict

from .actions import WriteFile, WriteReport
from .proposal import Proposal
from .validation import ReportVerdict

if TYPE_CHECKING:
    from .run import Run

__all__ = ["RepairPolicy", "RepairStep"]


class RepairStep(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["repair_step"] = "repair_step"
    action: Literal["retry", "rollback", "escalate"]
    failure: int
    note: str
    snapshot: str | None = None


@dataclass
class RepairPolicy:
    max_retries: int | None = None  # None: the run's contract.verification.max_repairs
    failures: int = 0
    rolled_back: bool = False
    healthy: str | None = None  # snapshot id: the state before the first draft
    history: list[RepairStep] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.max_retries is not None and (isinstance(self.max_retries, bool) or self.max_retries < 0):
            raise ValueError(f"max_retries must be a non-negative int or None, got {self.max_retries!r}")

    def before_execute(self, run: Run, proposal: Proposal) -> None:
        """Mark the last healthy state: a snapshot right before the artifact is first written."""
        if self.healthy is None and _writes_artifact(run, proposal):
            self.healthy = run.sandbox.snapshot(label="healthy: before the first draft").id

    def after_failure(self, run: Run, verdict: ReportVerdict) -> RepairStep:
        """One answer to a failed verification; the run carries it out."""
        self.failures += 1
        cap = self.max_retries if self.max_retries is not None else run.contract.verification.max_repairs
        why = "; ".join(verdict.reasons) or "checks failed"
        if self.rolled_back or (self.failures > cap and self.healthy is None):
            tried = "; ".join(f"#{s.failure} {s.action}" for s in self.history)
            step = RepairStep(action="escalate", failure=self.failures, note=(
                f"verification failed {self.failures} times (tried: {tried}); last failure: {why}. "
                "Retrying and rolling back did not fix it: a person must decide how to proceed"))
        elif self.failures <= cap:
            step = RepairStep(action="retry", failure=self.failures, note=f"retry {self.failures}/{cap}: fix {why}")
        else:
            self.rolled_back = True
            approach = _last_approach(run)
            step = RepairStep(action="rollback", failure=self.failures, snapshot=self.healthy, note=(
                f"rolled back to the last healthy snapshot {self.healthy}: approach {approach} failed because "
                f"{why}; try a different approach"))
        self.history.append(step)
        return step


def _writes_artifact(run: Run, proposal: Proposal) -> bool:
    action = proposal.action
    if isinstance(action, WriteReport):
        return True
    return isinstance(action, WriteFile) and _names(run, action.path) == _names(run, run.contract.verification.report.path)


def _names(run: Run, path: str) -> tuple[str, ...]:
    """*path* as the sandbox reads it, lexically: './report.md', 'report.md' and '<root>/report.md'
    name the same file (the sandbox refuses '..' anyway)."""
    if path.startswith("/"):
        for root in {str(run.sandbox.root), str(run.workspace)}:
            base = [c for c in root.split("/") if c]
            comps = [c for c in path.split("/") if c not in ("", ".")]
            if comps[: len(base)] == base:
                return tuple(comps[len(base) :])
    return tuple(c for c in path.split("/") if c not in ("", "."))


def _last_approach(run: Run) -> str:
    for record in reversed(run.records):
        if record.proposal is not None and _writes_artifact(run, record.proposal):
            return record.proposal.describe()
    return "(no draft written)"
