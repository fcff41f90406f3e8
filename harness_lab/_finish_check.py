"""Finish is a claim: the step that proposes it validates the artifact, and only passed checks move
the run to REVIEW_READY (with a receipt binding the bytes that were checked).

:class:`~harness_lab.run.Run` inherits this and supplies the part it calls (``rollback``, for a
repair that goes back to a snapshot); read :mod:`harness_lab.run` first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from ._run_base import RunBase, _sha
from .events import Note, StopReason
from .faults import CrashPoint
from .states import RunState
from .stop_rules import SAME_ROOT_CAUSE, root_cause
from .validation import MAX_REPORT_BYTES, Receipt, ReportVerdict, check_report

if TYPE_CHECKING:
    from .run import Run

__all__ = ["FinishCheck"]


class FinishCheck(RunBase):
    """The validate part of ``step()``: the finish step's effect."""

    def _validate_step(self) -> ReportVerdict | None:
        """Validation is the finish step's effect: a crash fault may strike either side of it."""
        if self._faults.armed:
            self._crash_point(CrashPoint.BEFORE_EFFECT)
        # A Ctrl-C mid-validation leaves the state VALIDATING (a repair may have rolled back): the
        # finish was carried out in part and is unrecorded, so it is a crash after the effect; with a
        # store, resume validates again from the last checkpoint (validation has no outside effect).
        try:
            verdict = self._validate()
        except BaseException as exc:
            self._crash_on_interrupt(exc, CrashPoint.AFTER_EFFECT, "finish", "validate")
            raise
        if self._faults.armed:
            self._crash_point(CrashPoint.AFTER_EFFECT)
        return verdict

    def _validate(self) -> ReportVerdict | None:
        self._transition(RunState.VALIDATING, "finish proposed: validating the artifact, not the claim")
        report = self.contract.verification.report
        # Checked reports are read one byte past the limit only (a flood is refused, not loaded whole).
        limit = MAX_REPORT_BYTES + 1 if self.validation else None
        snapshot = self.sandbox.read_bytes(report.path, limit)
        verdict = check_report(snapshot, self.executor.observed, self.evidence, report) if self.validation else None
        if verdict is not None and not verdict.accepted:
            self.context.add_feedback(self.step_no, "finish rejected: " + "; ".join(verdict.reasons),
                                      source=f"step {self.step_no}:validator")
            cause = root_cause(verdict) or ""
            new = self.failed_attempts.add(cause, _sha(snapshot))
            rule = self.contract.stop.rules[1]
            if self.repair is None and new and rule.fires(self.failed_attempts.causes):
                # The contract's stop.failure; with a repair policy, the policy answers it (a rollback).
                why = (f"stop.failure: {rule.describe()} ({cause}) over {rule.times} different drafts of "
                       f"{report.path}; retrying cannot fix this cause: change the approach, the goal or the checks")
                self._transition(RunState.BLOCKED, why)
                self.stop_reason = StopReason(code=SAME_ROOT_CAUSE, message=why)
                return verdict
            # only a Run is ever a FinishCheck: the repair policy reads it whole
            repair = self.repair.after_failure(cast("Run", self), verdict) if self.repair is not None else None
            if repair is not None:
                self._emit(Note, topic="repair", message=repair.note, data=repair.model_dump(mode="json"))
            if repair is not None and repair.action == "escalate":
                self._transition(RunState.BLOCKED, repair.note)
                self.stop_reason = StopReason(code="escalated", message=repair.note)
                return verdict
            self._transition(RunState.RUNNING, "checks failed: " + "; ".join(verdict.reasons))
            if repair is not None and repair.action == "rollback" and repair.snapshot is not None:
                self.rollback(repair.snapshot)  # files, run state and context together
                self._pending = None  # ask afresh, with the note: never repeat the failed approach unchanged
                self.context.add_feedback(self.step_no, repair.note, source="repair", key="repair:approach")
            return verdict
        self._faults.after_validate(self)
        if self.sandbox.read_bytes(report.path, limit) != snapshot:  # changed behind the validator
            why = "the artifact changed after it was validated; finish not accepted, validate it again"
            self.context.add_feedback(self.step_no, why, source=f"step {self.step_no}:validator")
            self._emit(Note, topic="artifact_changed", message=why,
                       data={"validated_sha256": _sha(snapshot)})
            self._transition(RunState.RUNNING, why)
            return verdict
        self.accepted_bytes = snapshot
        self.receipt = Receipt(
            artifact_path=report.path, artifact_sha256=_sha(snapshot), contract_version=self.contract.version,
            evidence_sha256=dict(self.executor.observed), step=self.step_no,
            structural="passed" if verdict is not None else "not_run",
        )
        self._transition(RunState.REVIEW_READY, "all checks passed" if verdict else "validation disabled: finish accepted unchecked")
        self.stop_reason = StopReason(code="checks_passed" if verdict else "finish_unvalidated",
                                      message="mechanical checks passed; ready for human review"
                                      if verdict else "finish accepted without validation")
        return verdict

    # -- the part validation uses: Run's ---------------------------------------------------------
    def rollback(self, snapshot_id: str) -> None:
        raise NotImplementedError
