"""Replay of a saved trace: the same proposals and human decisions, re-run through the harness.

:func:`replay_run` rebuilds a stored run's contract, feeds the recorded raw proposals to a fresh
run in a fresh workspace (external effects go to an in-memory outbox, never the real world), and
compares every step with the saved one (decision, state after, tool status). Determinism is the
point: a divergence means the harness (or the evidence) changed, and it is reported by step; what the
saved run met that a replay does not re-create (an outside write, an injected fault) is named with it.
The run's repair policy is rebuilt from its spec, as resume does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..context import ContextView
from ..errors import RunStateError, StoreError
from ..evidence import EvidenceCatalogue
from ..loop.approval import ApprovalDecision, ApprovalRequest, Approver, AskHuman
from ..loop.repair import RepairPolicy
from ..paths import data_dir
from ..proposers.base import EndpointFailure, ProposerOutput
from ..records.events import Note, StepRecord, load_step_row
from ..store import Store
from .checkpoint import stored_spec
from .checkpoint_record import ROW_ERRORS, row_error

if TYPE_CHECKING:
    from ..loop.run import Run

__all__ = ["ReplayProposer", "ReplayResult", "replay_run", "saved_trace"]

_HUMAN = ("approved", "rejected")


class ReplayProposer:
    """Proposes the recorded raw proposals in order; past the end it proposes ``finish``."""

    def __init__(self, raws: Sequence[object]) -> None:
        self.raws = list(raws)
        self.position = 0

    def propose(self, view: ContextView) -> object:
        raw = self.raws[self.position] if self.position < len(self.raws) else {"kind": "finish"}
        self.position += 1
        return raw

    def state(self) -> dict[str, Any]:
        return {"position": self.position}

    def restore(self, state: dict[str, Any]) -> None:
        self.position = int(state["position"])


@dataclass(frozen=True)
class ReplayResult:
    run: Run
    steps: int
    diverged_at: int | None
    detail: str

    @property
    def identical(self) -> bool:
        return self.diverged_at is None


def saved_trace(store: Store, run_id: str) -> list[StepRecord]:
    """Every committed step record of a run, oldest first (the step-0 registration row excluded). A row
    that does not read as a step record (an edited or damaged store) is a StoreError naming it."""
    records = []
    for row in store.steps(run_id):
        if row.record == "null":
            continue
        try:
            record = load_step_row(row.record)
        except ROW_ERRORS as exc:
            raise row_error(f"the step record of {run_id}@{row.step}", exc) from None
        if record.step != row.step:  # the trace and replay name steps by the record's number
            raise StoreError(f"the step record of {run_id}@{row.step} is unreadable: it says step {record.step}")
        records.append(record)
    return records


def _key(record: StepRecord) -> tuple[Any, ...]:
    tool = record.tool_result.status if record.tool_result else None
    return record.decision.verdict, record.state_after.value, tool


def replay_run(store: Store, run_id: str, *, evidence: EvidenceCatalogue | None = None,
               workspace: str | Path | None = None) -> ReplayResult:
    from ..loop.executor import Outbox
    from ..loop.run import Run

    records = saved_trace(store, run_id)
    if not records:
        raise RunStateError(f"run {run_id!r} has no recorded step to replay")
    if records[0].step != 1:  # a fork: its first steps are another run's, and so is its workspace then
        raise RunStateError(f"run {run_id!r} starts at step {records[0].step} from another run's checkpoint "
                            "(a fork): replay the run it was forked from")
    spec = stored_spec(run_id, store.run_info(run_id).spec)  # checked field by field: a store is untrusted input
    # An endpoint failure is replayed as one (the model proposed nothing then): the same step, not a shift.
    # A model's run was charged what its endpoint reported, which the harness cannot recount offline: the
    # replay charges each step the tokens the saved step was charged (a scripted run's are recounted).
    charged = spec.proposer is None or spec.proposer.kind != "scripted"
    raws: list[object] = []
    spent = 0
    for r in records:
        tokens, spent = r.usage.tokens - spent, r.usage.tokens
        if r.decision.verdict == "unavailable":
            raws.append(EndpointFailure(reason=r.decision.reason))
        elif r.proposal is not None and r.decision.verdict not in _HUMAN:
            raws.append(ProposerOutput(raw=r.proposal.raw, tokens=max(0, tokens)) if charged else r.proposal.raw)
    # A trace with a parked gate is replayed through approve()/reject(); else inline decisions as recorded.
    approver: Approver = AskHuman() if any(r.decision.verdict == "park" for r in records) else _Recorded(records)
    run = Run(contract=spec.contract, proposer=ReplayProposer(raws),
              evidence=evidence or EvidenceCatalogue.from_dir(data_dir() / "evidence"), workspace=workspace,
              validation=spec.validation, approver=approver,
              effects=Outbox(), run_id=f"{run_id}-replay",  # without the repair policy a retry/escalation diverged
              repair=RepairPolicy.from_spec(spec.repair.model_dump() if spec.repair is not None else None))
    for saved in records:
        if saved.proposal is None and saved.decision.verdict == "block":
            new = run.halt("replayed_halt", saved.decision.reason)
        elif saved.decision.verdict == "approved" and run.waiting is not None:
            new = run.approve(by="replay", edited=_approved_edit(saved))
        elif saved.decision.verdict == "rejected" and run.waiting is not None:
            new = run.reject(saved.decision.reason, by="replay")
        else:
            new = run.step()
        if _key(new) != _key(saved):
            detail = f"step {saved.step}: saved {_key(saved)} != replayed {_key(new)}"
            return ReplayResult(run, new.step, new.step, detail + _outside_causes(records, saved.step))
    return ReplayResult(run, len(records), None, f"{len(records)} steps replayed identically")


def _approved_edit(saved: StepRecord) -> dict[str, Any] | None:
    """The arguments a person approved with changes at this step (the step's proposal is the executed,
    edited call), or None for a plain approval: the replay executes what the saved run executed."""
    edited = any(e.kind == "human_decided" and e.edited for e in saved.events)
    return saved.proposal.arguments if edited and saved.proposal is not None else None


def _outside_causes(records: Sequence[StepRecord], upto: int) -> str:
    """What the saved run met that a replay does not re-create (an outside write, an injected fault):
    named, so the divergence is not read as a change of the harness."""
    causes = [f"step {e.step}: " + (e.message if e.topic == "fault" else "the workspace changed outside the run")
              for r in records if r.step <= upto for e in r.events
              if isinstance(e, Note) and e.topic in ("external_change", "fault")]
    return f" (the saved run met what a replay does not re-create: {'; '.join(causes)})" if causes else ""


class _Recorded:
    """Answers inline gate requests with the decisions recorded in the trace, in order."""

    def __init__(self, records: Sequence[StepRecord]) -> None:
        self._answers = [ApprovalDecision(approved=e.approved, reason=e.reason, by=e.by)
                         for r in records for e in r.events if e.kind == "human_decided"]

    def decide(self, request: ApprovalRequest) -> ApprovalDecision | None:
        return self._answers.pop(0) if self._answers else None
