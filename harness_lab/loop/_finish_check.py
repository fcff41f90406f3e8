"""Finish is a claim: the step that proposes it validates the artifact, and only passed checks move
the run to REVIEW_READY (with a receipt binding the bytes that were checked).

The contract's ``verification.checks`` names the layers run, in this order, each stopping the finish when
it fails: ``format`` (the report's structure, :func:`~harness_lab.validation.check_report`), ``functional``
(the contract's check commands in the run's sandbox, its protected and allowed files:
:func:`~harness_lab.validation.run_functional_layer`; a contract that names none has nothing for it to
do: "not applicable") and ``goal`` (``run.reviewer``, any
:class:`~harness_lab.validation.semantic.SemanticReviewer`, on the report's bytes; none given: not run).
The step's verdict is the first failed layer's (else the format layer's, else the functional one's); when
a layer runs after the format one, each layer that ran leaves a ``verification`` note with its own verdict,
and the receipt keeps each layer's outcome apart. So a report contract (no check commands, no reviewer) validates exactly
as before the layers existed.

:class:`~harness_lab.loop.run.Run` owns one (``run.finish_check``) and gives it the part it calls (``rollback``,
for a repair that goes back to a snapshot); read :mod:`harness_lab.loop.run` first.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from ..context import ContextManager
from ..contract import ControlContract
from ..evidence import EvidenceCatalogue
from ..faults import CrashPoint, FaultSchedule
from ..records.events import Event, Note, StepRecord, StopReason, Usage
from ..records.proposal import Proposal
from ..records.states import RunState
from ..sandbox import Sandbox
from ..validation import (
    MAX_REPORT_BYTES,
    LayerFailure,
    LayerVerdict,
    Receipt,
    ReportVerdict,
    Verdict,
    check_report,
    run_functional_layer,
    sha256_hex,
)
from ..validation.semantic import SemanticReviewer
from .crash import CrashGuard
from .executor import ToolExecutor
from .gates import LoopGates
from .repair import RepairPolicy
from .stop_rules import SAME_ROOT_CAUSE, FailedAttempts, root_cause

__all__ = ["FinishCheck"]


class _Checked(Protocol):
    """What validation reads and moves of the run (a protocol: this module never imports the run)."""

    contract: ControlContract
    validation: bool
    evidence: EvidenceCatalogue
    sandbox: Sandbox
    executor: ToolExecutor
    context: ContextManager
    crash: CrashGuard
    repair: RepairPolicy | None
    failed_attempts: FailedAttempts
    state: RunState
    stop_reason: StopReason | None
    receipt: Receipt | None
    accepted_bytes: bytes | None
    step_no: int
    _pending: Proposal | None
    _faults: FaultSchedule
    # what a repair policy and a fault read of it (repair.after_failure, faults.after_validate)
    workspace: Path
    gates: LoopGates
    usage: Usage
    @property
    def records(self) -> Sequence[StepRecord]: ...
    @property
    def events(self) -> Sequence[Event]: ...

    def _transition(self, after: RunState, reason: str) -> None: ...
    def _emit(self, event_type: Callable[..., Event], **fields: Any) -> None: ...


class FinishCheck:
    """The validate part of ``step()``: the finish step's effect. A collaborator the run owns
    (``run.finish_check``): it reads and moves the run's state through the run it is given."""

    def __init__(self, run: _Checked, rollback: Callable[[str], None]) -> None:
        self._run = run
        self._rollback = rollback  # Run.rollback: a repair that goes back to a snapshot
        self.reviewer: SemanticReviewer | None = None  # see Run.reviewer

    def validate_step(self) -> Verdict | None:
        """Validation is the finish step's effect: a crash fault may strike either side of it."""
        run = self._run
        if run._faults.armed:
            run.crash.point(CrashPoint.BEFORE_EFFECT)
        # A Ctrl-C mid-validation leaves the state VALIDATING (a repair may have rolled back): the
        # finish was carried out in part and is unrecorded, so it is a crash after the effect; with a
        # store, resume validates again from the last checkpoint (validation has no outside effect).
        try:
            verdict = self._validate()
        except BaseException as exc:
            run.crash.interrupted(exc, CrashPoint.AFTER_EFFECT, "finish", "validate")
            raise
        if run._faults.armed:
            run.crash.point(CrashPoint.AFTER_EFFECT)
        return verdict

    def _validate(self) -> Verdict | None:
        run = self._run
        run._transition(RunState.VALIDATING, "finish proposed: validating the artifact, not the claim")
        verification = run.contract.verification
        report = verification.report
        # Checked reports are read one byte past the limit only (a flood is refused, not loaded whole).
        limit = MAX_REPORT_BYTES + 1 if run.validation else None
        snapshot = run.sandbox.read_bytes(report.path, limit)
        verdict, functional, semantic = self._layers(snapshot) if run.validation else (None, None, None)
        if verdict is not None and not verdict.accepted:
            run.context.add_feedback(run.step_no, "finish rejected: " + "; ".join(verdict.reasons),
                                     source=f"step {run.step_no}:validator")
            cause = root_cause(verdict) or ""
            # the draft: the report's bytes, or for a functional layer's rejection the tree it checked
            draft = (verdict.tree_sha256 if isinstance(verdict, LayerVerdict) else None) or _sha(snapshot)
            new = run.failed_attempts.add(cause, draft)
            rule = run.contract.stop.rules[1]
            if run.repair is None and new and rule.fires(run.failed_attempts.causes):
                # The contract's stop.failure; with a repair policy, the policy answers it (a rollback).
                why = (f"stop.failure: {rule.describe()} ({cause}) over {rule.times} different drafts; "
                       "retrying cannot fix this cause: change the approach, the goal or the checks")
                run._transition(RunState.BLOCKED, why)
                run.stop_reason = StopReason(code=SAME_ROOT_CAUSE, message=why)
                return verdict
            repair = run.repair.after_failure(run, verdict) if run.repair is not None else None
            if repair is not None:
                run._emit(Note, topic="repair", message=repair.note, data=repair.model_dump(mode="json"))
            if repair is not None and repair.action == "escalate":
                run._transition(RunState.BLOCKED, repair.note)
                run.stop_reason = StopReason(code="escalated", message=repair.note)
                return verdict
            run._transition(RunState.RUNNING, "checks failed: " + "; ".join(verdict.reasons))
            if repair is not None and repair.action == "rollback" and repair.snapshot is not None:
                self._rollback(repair.snapshot)  # files, run state and context together
                run._pending = None  # ask afresh, with the note: never repeat the failed approach unchanged
                run.context.add_feedback(run.step_no, repair.note, source="repair", key="repair:approach")
            return verdict
        run._faults.after_validate(run)
        changed = run.sandbox.read_bytes(report.path, limit) != snapshot  # changed behind the validator
        if functional is not None and not changed and run.sandbox.workspace_hash() != functional.tree_sha256:
            changed = True  # the tree the checks passed on is no longer the tree there
        if changed:
            why = "the artifact changed after it was validated; finish not accepted, validate it again"
            run.context.add_feedback(run.step_no, why, source=f"step {run.step_no}:validator")
            run._emit(Note, topic="artifact_changed", message=why,
                      data={"validated_sha256": _sha(snapshot)} if functional is None else
                      {"validated_sha256": _sha(snapshot), "validated_tree_sha256": functional.tree_sha256})
            run._transition(RunState.RUNNING, why)
            return verdict
        checked = verdict is not None
        run.accepted_bytes = snapshot
        run.receipt = Receipt(
            artifact_path=report.path, artifact_sha256=_sha(snapshot), contract_version=run.contract.version,
            evidence_sha256=dict(run.executor.observed), step=run.step_no,
            structural="passed" if run.validation and "format" in verification.checks else "not_run",
            semantic="passed" if semantic is not None else "not_run",
            functional="passed" if functional is not None else "not_run" if _functional_applies(run) else
            "not_applicable",
            checks=functional.checks if functional is not None else (),
            tree_sha256=functional.tree_sha256 if functional is not None else None,
        )
        run._transition(RunState.REVIEW_READY, "all checks passed" if checked else "validation disabled: finish accepted unchecked")
        run.stop_reason = StopReason(code="checks_passed" if checked else "finish_unvalidated",
                                     message="mechanical checks passed; ready for human review"
                                     if checked else "finish accepted without validation")
        return verdict

    def _layers(self, snapshot: bytes | None) -> tuple[Verdict | None, LayerVerdict | None, LayerVerdict | None]:
        """The contract's layers in order, up to the first that fails: (the step's verdict, the functional
        layer's verdict if it ran, the goal layer's if it ran)."""
        run = self._run
        verification = run.contract.verification
        layers = verification.checks
        structural: ReportVerdict | None = None
        if "format" in layers:
            structural = check_report(snapshot, run.executor.observed, run.evidence, verification.report)
            if not structural.accepted:
                return structural, None, None
        functional = goal = None
        run_functional = "functional" in layers and _functional_applies(run)
        if structural is not None and (run_functional or ("goal" in layers and self.reviewer is not None)):
            # more layers follow: the format layer's pass gets its own note, as theirs do
            run._emit(Note, topic="verification", message="format layer passed",
                      data=structural.model_dump(mode="json"))  # its layer reads "structural"
        if run_functional:
            functional = run_functional_layer(run.sandbox, verification)
            self._note_layer(functional)
            if not functional.accepted:
                return functional, functional, None
        if "goal" in layers and self.reviewer is not None:
            review = self.reviewer.review(snapshot or b"", run.evidence)
            goal = LayerVerdict(layer="goal", accepted=review.passed, errors=tuple(
                LayerFailure(code="goal_failed", message=f"{self.reviewer.name}: {why}") for why in review.reasons))
            self._note_layer(goal, review.model_dump(mode="json"))
            if not goal.accepted:
                return goal, functional, goal
        return structural or functional or goal, functional, goal

    def _note_layer(self, verdict: LayerVerdict, detail: dict[str, object] | None = None) -> None:
        run = self._run
        said = "passed" if verdict.accepted else "failed: " + "; ".join(verdict.reasons)
        data = verdict.model_dump(mode="json") if detail is None else {**verdict.model_dump(mode="json"), "review": detail}
        run._emit(Note, topic="verification", message=f"{verdict.layer} layer {said}", data=data)


def _functional_applies(run: _Checked) -> bool:
    """Whether the contract gives the functional layer anything to check."""
    v = run.contract.verification
    return bool(v.functional or v.protected or v.allowed_files)


def _sha(data: bytes | None) -> str:
    return sha256_hex(data or b"")
