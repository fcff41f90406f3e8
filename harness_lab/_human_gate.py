"""The human gate: a gated proposal is asked of the approver, parks the run WAITING_FOR_HUMAN,
and is then approved (executed exactly as requested, or exactly as a person edited it: ``approve(edited=...)``)
or rejected; a late answer executes nothing.

:class:`~harness_lab.run.Run` inherits this and supplies the step parts it calls (``_execute``,
``_observe``, ``_check_external_change``); read :mod:`harness_lab.run` first.
"""

from __future__ import annotations

from collections.abc import Mapping

from ._edits import edited_proposal
from ._run_base import RunBase
from .approval import ApprovalDecision, ApprovalRequest
from .errors import RunStateError
from .events import Decision, HumanDecided, Note, StepRecord, StopReason
from .faults import CrashPoint
from .proposal import Proposal
from .states import RunState
from .tools import ToolResult

__all__ = ["HumanGate"]


class HumanGate(RunBase):
    """``approve`` / ``reject`` for a parked proposal, and the gate step() consults."""

    def approve(self, *, by: str = "human", args_sha256: str | None = None,
                edited: Mapping[str, object] | None = None) -> StepRecord:
        """Execute the parked proposal: exactly the action that was approved. ``args_sha256`` (if given)
        must be the request's. ``edited``: approve with changes (as Inspect's approvers can), e.g.
        ``edited={"message": "..."}``: the fields given replace the call's arguments, the tool stays; what
        executes is exactly the edited call, recorded as such (the step's proposal; ``HumanDecided``
        carries both sha256s, ``edited=True`` and the original arguments). An edit the tool cannot take
        is refused with one line naming the field: nothing executed, the request still waits.
        After the gate's timeout, or past the run's wall-clock limit, it is too late: the step stops the
        run safely (human_timeout, or wall_clock as step() would) and executes nothing."""
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
        self._open_step()
        # Too late if the gate timed out, or if the run's own limits (its wall clock, as before any
        # tool call) ran out while it waited: the step stops the run as step() would, acting on nothing.
        if (late := self._gate_timed_out() or self.gates.before_tool_call(self._used)) is not None:
            self.waiting, self._pending = None, None
            what = "the gate's timeout" if late.code == "human_timeout" else f"the run's limit ({late.message})"
            self._emit(Note, topic="late_approval", message=f"approval by {by} came after {what}; nothing executed",
                       data={"by": by, "args_sha256": request.args_sha256, "stop": late.code})
            verdict = "rejected" if late.code == "human_timeout" else "exhaust"
            return self._close(requested, Decision(verdict=verdict, reason=late.message), stop=late)
        try:
            self._check_external_change()
            self.waiting, self._pending = None, None
            if changed:
                self._emit(HumanDecided, approved=True, reason="approved with changes", args_sha256=request.args_sha256,
                           by=by, edited=True, edited_args_sha256=proposal.args_sha256, original_args=request.args)
            else:
                self._emit(HumanDecided, approved=True, reason="approved", args_sha256=request.args_sha256, by=by)
            self._transition(RunState.RUNNING, f"{request.category} approved{' with changes' if changed else ''} by {by}")
        except BaseException:  # a Ctrl-C (or a failed look) before anything ran: undo the step, the request waits
            self._abandon_step()
            self.waiting, self._pending = request, requested
            raise
        decision = Decision(verdict="approved", reason=f"approved{' with changes' if changed else ''} by {by}")
        # Keyed by the request and the call that executes, not the step number: a resumed run re-approving
        # (the same edit) applies it once; an edited call is another effect than the one requested.
        result = self._execute(proposal, key=f"{self.run_id}:gate:{request.step}:{proposal.args_sha256[:16]}")
        try:
            self._observe(proposal, decision, result)
        except BaseException as exc:  # Ctrl-C: the approved effect ran, the step is unrecorded: a crash
            self._crash_on_interrupt(exc, CrashPoint.AFTER_EFFECT, request.action_kind, "observe")
            raise
        return self._close(proposal, decision, result=result)

    def reject(self, reason: str, *, by: str = "human") -> StepRecord:
        """Refuse the parked proposal: the run stops safely, with the reason kept."""
        _require_text(reason=reason, by=by)
        request, proposal = self._require_waiting()
        self._open_step()
        self.waiting, self._pending = None, None
        self._emit(HumanDecided, approved=False, reason=reason, args_sha256=request.args_sha256, by=by)
        stop = StopReason(code="human_rejected", message=f"{request.category} rejected by {by}: {reason}")
        return self._close(proposal, Decision(verdict="rejected", reason=reason), stop=stop)

    def _human_gate(self, proposal: Proposal) -> tuple[Decision, StopReason | None]:
        assert proposal.action is not None
        request = ApprovalRequest(
            step=self.step_no, action_kind=proposal.action.kind, category=proposal.action.gate_category,
            args=proposal.action.model_dump(mode="json"), args_sha256=proposal.args_sha256,
            requested_at=self.clock.now(),
        )
        try:
            answer = self.approver.decide(request)
        except Exception as exc:  # a failed approver decides nothing: stop safely, never act
            return _approver_failed(request, f"raised {type(exc).__name__}: {exc}")
        except BaseException:  # Ctrl-C while a person decides: nothing has run, so the step is undone
            self._abandon_decision()
            raise
        if answer is not None and not isinstance(answer, ApprovalDecision):
            return _approver_failed(request, f"answered {answer!r}, not an ApprovalDecision or None")
        if answer is None:  # _close checkpoints once the run is WAITING_FOR_HUMAN
            self.waiting, self._pending = request, proposal
            return Decision(verdict="park", reason=f"{request.category} needs human approval"), None
        self._emit(HumanDecided, approved=answer.approved, reason=answer.reason,
                   args_sha256=request.args_sha256, by=answer.by)
        if answer.approved:
            return Decision(verdict="execute", reason=f"approved by {answer.by}"), None
        return Decision(verdict="rejected", reason=answer.reason), StopReason(code="human_rejected", message=answer.reason)

    def _abandon_decision(self) -> None:
        """Undo a step interrupted before anything ran (see _abandon_step), and its decision too: the
        proposal is pending again, the gates and the decision count as before it, so the next step
        asks about the same proposal as if for the first time."""
        assert self._gates_at_start is not None
        self._abandon_step()
        self._pending, self._in_flight = self._in_flight, None
        self.gates.restore(self.gates.state(self._gates_at_start))
        self._gates_at_start = None
        self._used.decisions -= 1

    def _require_waiting(self) -> tuple[ApprovalRequest, Proposal]:
        if self.crashed is not None:  # the cause, not "nothing waits" (a crashed approve cleared the wait)
            raise RunStateError(f"run {self.run_id} {self._crash_why()}; resume from a checkpoint")
        if self.waiting is None or self._pending is None:
            raise RunStateError(f"run {self.run_id} is {self.state.value}: nothing waits for approval")
        return self.waiting, self._pending

    @property
    def gate_expired(self) -> bool:
        """A human gate waits past its timeout: approving is too late, the next step closes it
        (human_timeout, BLOCKED). Reads the clock only while a gate with a timeout waits."""
        return self._gate_timed_out() is not None

    @property
    def step_due(self) -> bool:
        """Whether ``run()`` (and ``harness-lab run --db``'s loop) takes another step: not after the end,
        and not while a human decides, unless the gate's timeout passed (the step closes it); not right
        after the model's endpoint failed too often (a later ``step()`` or a resume asks it again)."""
        return (not self.state.terminal and not self._parked_on_endpoint
                and (self.waiting is None or self.gate_expired))

    def _gate_timed_out(self) -> StopReason | None:
        limit = self.contract.human_gate.timeout_seconds
        if self.waiting is None or limit is None or self.clock.now() - self.waiting.requested_at < limit:
            return None
        return StopReason(code="human_timeout", message=f"no human decision within {limit}s; stopped safely")

    # -- the step parts the gate uses: Run's --------------------------------------------------
    def _execute(self, proposal: Proposal, key: str | None = None) -> ToolResult:
        raise NotImplementedError

    def _observe(self, proposal: Proposal, decision: Decision, result: ToolResult | None) -> None:
        raise NotImplementedError

    def _check_external_change(self) -> bool:
        raise NotImplementedError


def _require_text(**given: object) -> None:
    """Who decided and why go into the trace: refused before the step opens, not half-way through it."""
    for name, value in given.items():
        if not isinstance(value, str):
            raise ValueError(f"{name}: a string, got {value!r}")


def _approver_failed(request: ApprovalRequest, what: str) -> tuple[Decision, StopReason]:
    why = f"the approver {what}; {request.category} not executed, the run stopped safely"
    return Decision(verdict="block", reason=why), StopReason(code="approver_error", message=why)
