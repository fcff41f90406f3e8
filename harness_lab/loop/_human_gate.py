"""The human gate: a gated proposal is asked of the approver, parks the run WAITING_FOR_HUMAN,
and is then approved (executed exactly as requested, or exactly as a person edited it: ``approve(edited=...)``)
or rejected; a late answer executes nothing.

:class:`~harness_lab.loop.run.Run` owns one (``run.human_gate``) and gives it the step parts an approved call
runs through (``_execute``, ``_observe``, ``_check_external_change``); read :mod:`harness_lab.loop.run` first.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ..errors import RunStateError
from ..faults import CrashPoint
from ..records.events import Decision, HumanDecided, Note, StepRecord, StopReason
from ..records.proposal import Proposal
from ..records.states import RunState
from ..records.tools import ToolResult
from ._edits import edited_proposal
from ._run_base import RunBase
from .approval import ApprovalDecision, ApprovalRequest

__all__ = ["HumanGate"]


class HumanGate:
    """``approve`` / ``reject`` for a parked proposal, and the gate step() consults. A collaborator the
    run owns (``run.human_gate``; ``run.approve`` and the like delegate here): it reads and moves the
    run's state through the run it is given, and runs an approved call with the run's step parts."""

    def __init__(self, run: RunBase, *, execute: Callable[[Proposal, str | None], ToolResult],
                 observe: Callable[[Proposal, Decision, ToolResult | None], None],
                 check_external_change: Callable[[], bool]) -> None:
        self._run = run
        # Run's step parts: an approved call runs as step() would run it.
        self._execute, self._observe, self._check_external_change = execute, observe, check_external_change

    def approve(self, *, by: str = "human", args_sha256: str | None = None,
                edited: Mapping[str, object] | None = None) -> StepRecord:
        """See :meth:`Run.approve <harness_lab.loop.run.Run.approve>`."""
        run = self._run
        _require_text(by=by)
        request, proposal = self._require_waiting()
        if proposal.args_sha256 != request.args_sha256 or (args_sha256 is not None and args_sha256 != request.args_sha256):
            raise RunStateError("the approved arguments differ from the pending action's; nothing executed")
        requested = proposal
        if edited is not None:
            if not isinstance(edited, Mapping):
                raise RunStateError(f"approve: edited: a mapping of field -> value, got {type(edited).__name__}")
            proposal = edited_proposal(proposal, edited, what="approve edited")
        changed = proposal.args_sha256 != request.args_sha256
        run._open_step()
        # Too late if the gate timed out, or if the run's own limits (its wall clock, as before any
        # tool call) ran out while it waited: the step stops the run as step() would, acting on nothing.
        if (late := self.timed_out() or run.gates.before_tool_call(run._used)) is not None:
            run.waiting, run._pending = None, None
            what = "the gate's timeout" if late.code == "human_timeout" else f"the run's limit ({late.message})"
            run._emit(Note, topic="late_approval", message=f"approval by {by} came after {what}; nothing executed",
                      data={"by": by, "args_sha256": request.args_sha256, "stop": late.code})
            verdict = "rejected" if late.code == "human_timeout" else "exhaust"
            return run._close(requested, Decision(verdict=verdict, reason=late.message), stop=late)
        try:
            self._check_external_change()
            run.waiting, run._pending = None, None
            if changed:
                run._emit(HumanDecided, approved=True, reason="approved with changes", args_sha256=request.args_sha256,
                          by=by, edited=True, edited_args_sha256=proposal.args_sha256, original_args=request.args)
            else:
                run._emit(HumanDecided, approved=True, reason="approved", args_sha256=request.args_sha256, by=by)
            run._transition(RunState.RUNNING, f"{request.category} approved{' with changes' if changed else ''} by {by}")
        except BaseException:  # a Ctrl-C (or a failed look) before anything ran: undo the step, the request waits
            run._abandon_step()
            run.waiting, run._pending = request, requested
            raise
        decision = Decision(verdict="approved", reason=f"approved{' with changes' if changed else ''} by {by}")
        # Keyed by the request and the call that executes, not the step number: a resumed run re-approving
        # (the same edit) applies it once; an edited call is another effect than the one requested.
        result = self._execute(proposal, f"{run.run_id}:gate:{request.step}:{proposal.args_sha256[:16]}")
        try:
            self._observe(proposal, decision, result)
        except BaseException as exc:  # Ctrl-C: the approved effect ran, the step is unrecorded: a crash
            run._crash_on_interrupt(exc, CrashPoint.AFTER_EFFECT, request.action_kind, "observe")
            raise
        return run._close(proposal, decision, result=result)

    def reject(self, reason: str, *, by: str = "human") -> StepRecord:
        """See :meth:`Run.reject <harness_lab.loop.run.Run.reject>`."""
        run = self._run
        _require_text(reason=reason, by=by)
        request, proposal = self._require_waiting()
        run._open_step()
        run.waiting, run._pending = None, None
        run._emit(HumanDecided, approved=False, reason=reason, args_sha256=request.args_sha256, by=by)
        stop = StopReason(code="human_rejected", message=f"{request.category} rejected by {by}: {reason}")
        return run._close(proposal, Decision(verdict="rejected", reason=reason), stop=stop)

    def decide(self, proposal: Proposal) -> tuple[Decision, StopReason | None]:
        run = self._run
        assert proposal.action is not None
        request = ApprovalRequest(
            step=run.step_no, action_kind=proposal.action.kind, category=proposal.action.gate_category,
            args=proposal.action.model_dump(mode="json"), args_sha256=proposal.args_sha256,
            requested_at=run.clock.now(),
        )
        try:
            answer = run.approver.decide(request)
        except Exception as exc:  # a failed approver decides nothing: stop safely, never act
            return _approver_failed(request, f"raised {type(exc).__name__}: {exc}")
        except BaseException:  # Ctrl-C while a person decides: nothing has run, so the step is undone
            self._abandon_decision()
            raise
        if answer is not None and not isinstance(answer, ApprovalDecision):
            return _approver_failed(request, f"answered {answer!r}, not an ApprovalDecision or None")
        if answer is None:  # _close checkpoints once the run is WAITING_FOR_HUMAN
            run.waiting, run._pending = request, proposal
            return Decision(verdict="park", reason=f"{request.category} needs human approval"), None
        run._emit(HumanDecided, approved=answer.approved, reason=answer.reason,
                  args_sha256=request.args_sha256, by=answer.by)
        if answer.approved:
            return Decision(verdict="execute", reason=f"approved by {answer.by}"), None
        return Decision(verdict="rejected", reason=answer.reason), StopReason(code="human_rejected", message=answer.reason)

    def _abandon_decision(self) -> None:
        """Undo a step interrupted before anything ran (see _abandon_step), and its decision too: the
        proposal is pending again, the gates and the decision count as before it, so the next step
        asks about the same proposal as if for the first time."""
        run = self._run
        assert run._gates_at_start is not None
        run._abandon_step()
        run._pending, run._in_flight = run._in_flight, None
        run.gates.restore(run.gates.state(run._gates_at_start))
        run._gates_at_start = None
        run._used.decisions -= 1

    def _require_waiting(self) -> tuple[ApprovalRequest, Proposal]:
        run = self._run
        if run.crashed is not None:  # the cause, not "nothing waits" (a crashed approve cleared the wait)
            raise RunStateError(f"run {run.run_id} {run._crash_why()}; resume from a checkpoint")
        if run.waiting is None or run._pending is None:
            raise RunStateError(f"run {run.run_id} is {run.state.value}: nothing waits for approval")
        return run.waiting, run._pending

    @property
    def gate_expired(self) -> bool:
        """See :attr:`Run.gate_expired <harness_lab.loop.run.Run.gate_expired>`."""
        return self.timed_out() is not None

    @property
    def step_due(self) -> bool:
        """See :attr:`Run.step_due <harness_lab.loop.run.Run.step_due>`."""
        run = self._run
        return (not run.state.terminal and not run._parked_on_endpoint
                and (run.waiting is None or self.gate_expired))

    def timed_out(self) -> StopReason | None:
        run = self._run
        limit = run.contract.human_gate.timeout_seconds
        if run.waiting is None or limit is None or run.clock.now() - run.waiting.requested_at < limit:
            return None
        return StopReason(code="human_timeout", message=f"no human decision within {limit}s; stopped safely")


def _require_text(**given: object) -> None:
    """Who decided and why go into the trace: refused before the step opens, not half-way through it."""
    for name, value in given.items():
        if not isinstance(value, str):
            raise ValueError(f"{name}: a string, got {value!r}")


def _approver_failed(request: ApprovalRequest, what: str) -> tuple[Decision, StopReason]:
    why = f"the approver {what}; {request.category} not executed, the run stopped safely"
    return Decision(verdict="block", reason=why), StopReason(code="approver_error", message=why)
