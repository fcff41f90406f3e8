"""Repair after a failed verification (seed 003, 5.3): retry, then roll back, then escalate.

``Run(repair=RepairPolicy())`` turns it on; it is off by default, because seed 004's ten-scenario
table measures plain feedback loops. With it on, each failed finish is answered by one
:class:`RepairStep`:

1. failures 1 .. ``max_retries`` (by default the contract's ``verification.max_repairs``, 3 in the
   shipped contract): *retry* -- the reasons are fed back, the proposer tries again;
2. the next failure, or an earlier one on which the contract's ``stop.failure`` rule fires (the same
   root cause failed twice over different drafts: :mod:`harness_lab.loop.stop_rules`): *rollback* -- the workspace, run state and context return to the last healthy
   snapshot (taken before the first draft of the artifact) and a note says "approach X failed
   because Y; try a different approach";
3. a failure after the rollback: *escalate* -- the run stops BLOCKED with code ``escalated`` and a
   report of what was tried and why it failed, for a person to decide.

A run with a store keeps the policy across a kill: its configuration (:meth:`RepairPolicy.spec`) is
in the run's spec, its state (:meth:`RepairPolicy.state`) in each checkpoint row; resume and fork
rebuild it. The healthy snapshot lived in the sandbox of the process that took it: a run continued
elsewhere can no longer roll back to it, so a failure past the cap escalates there instead.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict

from ..contract import ControlContract
from ..records.actions import WriteFile, WriteReport
from ..records.events import StepRecord
from ..records.proposal import Proposal
from ..sandbox import Sandbox
from ..validation import Verdict
from .stop_rules import FailedAttempts

__all__ = ["RepairPolicy", "RepairStep"]


class RepairStep(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["repair_step"] = "repair_step"
    action: Literal["retry", "rollback", "escalate"]
    failure: int
    note: str
    snapshot: str | None = None


class _Run(Protocol):
    """What the policy reads of a run (a protocol: this module never imports the run)."""

    @property
    def contract(self) -> ControlContract: ...
    @property
    def sandbox(self) -> Sandbox: ...
    @property
    def workspace(self) -> Path: ...
    @property
    def failed_attempts(self) -> FailedAttempts: ...
    @property
    def records(self) -> Sequence[StepRecord]: ...


@dataclass
class RepairPolicy:
    max_retries: int | None = None  # None: the run's contract.verification.max_repairs
    failures: int = 0
    rolled_back: bool = False
    healthy: str | None = None  # snapshot id: the state before the first draft
    history: list[RepairStep] = field(default_factory=list)
    # The healthy snapshot of a run continued in another process or as a fork: its sandbox does not
    # hold it, so there is nothing to roll back to (a new one would hold the failed draft).
    healthy_lost: str | None = None

    def __post_init__(self) -> None:
        if self.max_retries is not None and (not isinstance(self.max_retries, int) or isinstance(self.max_retries, bool)
                                             or self.max_retries < 0):
            raise ValueError(f"max_retries must be a non-negative int or None, got {self.max_retries!r}")

    def spec(self) -> dict[str, Any]:
        """The configuration, for the run's spec (what rebuilds the policy in another process)."""
        return {"max_retries": self.max_retries}

    @classmethod
    def from_spec(cls, spec: dict[str, Any] | None) -> RepairPolicy | None:
        """A fresh policy of :meth:`spec`'s configuration; None (an old spec, or no policy): none."""
        return None if spec is None else cls(max_retries=spec.get("max_retries"))

    def state(self) -> dict[str, Any] | None:
        """What a checkpoint row holds of the policy; None while it is untouched (the row leaves it out)."""
        if not self.failures and not self.rolled_back and self.healthy is None and self.healthy_lost is None \
                and not self.history:
            return None
        return {"failures": self.failures, "rolled_back": self.rolled_back, "healthy": self.healthy,
                "healthy_lost": self.healthy_lost, "history": [s.model_dump(mode="json") for s in self.history]}

    def restore(self, state: dict[str, Any] | None, snapshots: Collection[str]) -> None:
        """Continue from a checkpoint's :meth:`state` (resume, fork) in a run whose sandbox holds the
        snapshot ids ``snapshots``; None: untouched. A healthy snapshot not among them is lost."""
        state = state or {}
        self.failures, self.rolled_back = int(state.get("failures", 0)), bool(state.get("rolled_back", False))
        self.history = [RepairStep.model_validate(s) for s in state.get("history", ())]
        self.healthy, self.healthy_lost = state.get("healthy"), state.get("healthy_lost")
        if self.healthy is not None and self.healthy not in snapshots:
            # Ids restart in a new sandbox ("snap-0001"): the old id must never name a new snapshot.
            self.healthy, self.healthy_lost = None, self.healthy

    def before_execute(self, run: _Run, proposal: Proposal) -> None:
        """Mark the last healthy state: a snapshot right before the artifact is first written."""
        if self.healthy is None and self.healthy_lost is None and _writes_artifact(run, proposal):
            self.healthy = run.sandbox.snapshot(label="healthy: before the first draft").id

    def after_failure(self, run: _Run, verdict: Verdict) -> RepairStep:
        """One answer to a failed verification; the run carries it out."""
        self.failures += 1
        cap = self.max_retries if self.max_retries is not None else run.contract.verification.max_repairs
        why = "; ".join(verdict.reasons) or "checks failed"
        # The contract's stop.failure, over the run's attempts (harness_lab.loop.stop_rules): when it fires,
        # retrying cannot fix the cause, so the policy moves on before the cap.
        rule = run.contract.stop.rules[1]
        stuck = rule.fires(run.failed_attempts.causes)
        if stuck:
            why += f" ({rule.describe()}: retrying cannot fix it)"
        if self.rolled_back or ((self.failures > cap or stuck) and self.healthy is None):
            tried = "; ".join(f"#{s.failure} {s.action}" for s in self.history)
            lost = ("" if self.rolled_back or self.healthy_lost is None else
                    f"; the healthy snapshot {self.healthy_lost} did not survive the restart: no rollback is possible")
            step = RepairStep(action="escalate", failure=self.failures, note=(
                f"verification failed {self.failures} times (tried: {tried}); last failure: {why}. "
                f"Retrying and rolling back did not fix it: a person must decide how to proceed{lost}"))
        elif self.failures <= cap and not stuck:
            step = RepairStep(action="retry", failure=self.failures, note=f"retry {self.failures}/{cap}: fix {why}")
        else:
            self.rolled_back = True
            approach = _last_approach(run)
            step = RepairStep(action="rollback", failure=self.failures, snapshot=self.healthy, note=(
                f"rolled back to the last healthy snapshot {self.healthy}: approach {approach} failed because "
                f"{why}; try a different approach"))
        self.history.append(step)
        return step


def _writes_artifact(run: _Run, proposal: Proposal) -> bool:
    action = proposal.action
    if isinstance(action, WriteReport):
        return True
    return isinstance(action, WriteFile) and _names(run, action.path) == _names(run, run.contract.verification.report.path)


def _names(run: _Run, path: str) -> tuple[str, ...]:
    """*path* as the sandbox reads it, lexically: './report.md', 'report.md' and '<root>/report.md'
    name the same file (the sandbox refuses '..' anyway)."""
    if path.startswith("/"):
        for root in {str(run.sandbox.root), str(run.workspace)}:
            base = [c for c in root.split("/") if c]
            comps = [c for c in path.split("/") if c not in ("", ".")]
            if comps[: len(base)] == base:
                return tuple(comps[len(base) :])
    return tuple(c for c in path.split("/") if c not in ("", "."))


def _last_approach(run: _Run) -> str:
    for record in reversed(run.records):
        if record.proposal is not None and _writes_artifact(run, record.proposal):
            return record.proposal.describe()
    return "(no draft written)"
