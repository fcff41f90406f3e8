"""What a study measures: one :class:`RunOutcome` per run, one :class:`GroupSummary` per group.

Every metric has its definition in :data:`METRIC_DEFINITIONS`, written into the study's output.
Ground truth is a scenario's ``labels.acceptable_reports`` (report bytes fixed before any run),
never any validator's verdict. ``wall_ms`` is the only measurement that depends on the machine;
it is kept out of :meth:`RunOutcome.key` so results compare equal across executors.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from .noise import Perturbation

__all__ = ["METRIC_DEFINITIONS", "GroupSummary", "RunOutcome", "summarize"]

METRIC_DEFINITIONS: dict[str, str] = {
    "runs": "number of runs in the group (scenarios x seeds)",
    "completion": "runs that delivered a report the labels call acceptable, divided by runs",
    "attainable": "runs whose (perturbed) script writes at least one acceptable report at all "
                  "- the most any group can complete",
    "delivered": "runs that ended REVIEW_READY and were not held by a semantic review",
    "false_accepts": "delivered runs whose delivered bytes are not an acceptable report per the labels",
    "false_rejects": "runs in which an acceptable report (per the labels) was refused at least once, "
                     "by the structural checks or by the semantic review",
    "decisions": "mean proposals decided by the harness per run (the budget's max_decisions counts these)",
    "tool_calls": "mean tool calls executed per run",
    "tokens": "mean tokens spent per run (endpoint-reported, else the offline counter over each context view)",
    "reviews": "mean semantic reviews per run (each is a call to a judge: cost too)",
    "revisions": "mean report writes per run after its first rejection (0 in a group without revision)",
    "latency_steps": "mean steps from start to the terminal state (deterministic latency)",
    "wall_ms": "median wall-clock milliseconds per run on this machine (informational, not compared)",
    "exhaustions": "runs that ended EXHAUSTED (a budget ran out)",
    "blocked": "runs that ended BLOCKED (forbidden action, no progress, a repair policy's escalation, "
               "a rejection in a group without revision, or a human refusal)",
}


class RunOutcome(BaseModel):
    """One run of one scenario under one seed in one group, scored against the fixed labels."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["run_outcome"] = "run_outcome"
    group: str
    scenario: str
    seed: int
    perturbations: tuple[Perturbation, ...]
    final_state: str
    stop_reason: str
    structural: Literal["passed", "not_run"] | None  # the receipt's structural field, None without one
    semantic: Literal["passed", "failed", "not_run"]
    semantic_reasons: tuple[str, ...] = ()
    delivered: bool
    delivered_acceptable: bool
    attainable: bool
    false_reject: bool
    rejections: int
    decisions: int
    tool_calls: int
    tokens: int
    reviews: int
    steps: int
    repair: Literal["on", "off"]
    revisions: int = 0  # report writes after the first rejection
    wall_ms: float

    @property
    def false_accept(self) -> bool:
        return self.delivered and not self.delivered_acceptable

    def key(self) -> dict[str, Any]:
        """Everything but the machine-dependent wall time: equal runs have equal keys."""
        return self.model_dump(mode="json", exclude={"wall_ms"})


class GroupSummary(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["group_summary"] = "group_summary"
    group: str
    runs: int
    completed: int
    attainable: int
    delivered: int
    false_accepts: int
    false_rejects: int
    decisions: float
    tool_calls: float
    tokens: float
    reviews: float
    revisions: float = 0.0
    latency_steps: float
    wall_ms: float
    exhaustions: int
    blocked: int

    @property
    def completion(self) -> float:
        return self.completed / self.runs if self.runs else 0.0


def summarize(group: str, outcomes: Sequence[RunOutcome]) -> GroupSummary:
    rows = [o for o in outcomes if o.group == group]
    n = len(rows)

    def mean(values: list[int]) -> float:
        return round(sum(values) / n, 3) if n else 0.0

    return GroupSummary(
        group=group, runs=n,
        completed=sum(o.delivered_acceptable for o in rows),
        attainable=sum(o.attainable for o in rows),
        delivered=sum(o.delivered for o in rows),
        false_accepts=sum(o.false_accept for o in rows),
        false_rejects=sum(o.false_reject for o in rows),
        decisions=mean([o.decisions for o in rows]),
        tool_calls=mean([o.tool_calls for o in rows]),
        tokens=mean([o.tokens for o in rows]),
        reviews=mean([o.reviews for o in rows]),
        revisions=mean([o.revisions for o in rows]),
        latency_steps=mean([o.steps for o in rows]),
        wall_ms=round(statistics.median(o.wall_ms for o in rows), 3) if n else 0.0,
        exhaustions=sum(o.final_state == "EXHAUSTED" for o in rows),
        blocked=sum(o.final_state == "BLOCKED" for o in rows),
    )
