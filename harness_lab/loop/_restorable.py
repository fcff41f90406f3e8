"""The run's restorable state: ``capture`` / ``restore`` / ``continue_from``, which snapshots,
checkpoints, rollback, resume and forks share (:class:`RunImage`), and what the run used, counted in
:class:`_Counters` (``usage`` is the run's).

:class:`~harness_lab.loop._run_base.RunBase` owns a :class:`RunImage` (``run.image``) and delegates to it;
read :mod:`harness_lab.loop.run` first.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeGuard

from ..clock import Clock
from ..context import ContextManager
from ..persistence.checkpoint_record import RUN_STATE_EMPTY
from ..proposers.base import EndpointFailure, Proposer, StatefulProposer
from ..records.events import Event, Restored, StopReason, Usage
from ..records.proposal import Proposal, parse_proposal
from ..records.states import RunState
from ..sandbox import Sandbox
from ..validation import Receipt
from .approval import ApprovalRequest
from .executor import ToolExecutor
from .gates import GatesMark, LoopGates
from .repair import RepairPolicy
from .stop_rules import FailedAttempts

__all__ = ["RunImage"]


class _Held(Protocol):
    """What the image reads and sets of a run (a protocol: this module never imports the run)."""

    state: RunState
    stop_reason: StopReason | None
    executor: ToolExecutor
    gates: LoopGates
    proposer: Proposer
    repair: RepairPolicy | None
    context: ContextManager
    sandbox: Sandbox
    clock: Clock
    receipt: Receipt | None
    accepted_bytes: bytes | None
    waiting: ApprovalRequest | None
    failed_attempts: FailedAttempts
    step_no: int
    _seq: int
    usage: Usage
    _pending: Proposal | None
    _failed_ask: EndpointFailure | None
    _endpoint_failures: int
    _parked_on_endpoint: bool
    _in_flight: Proposal | None
    _gates_at_start: GatesMark | None

    def _emit(self, event_type: Callable[..., Event], **fields: Any) -> None: ...


class RunImage:
    """The part of a run a snapshot or checkpoint holds, and how it is taken and put back: a
    collaborator the run owns (``run.image``; ``run.capture()``, ``restore`` and ``continue_from`` delegate here)."""

    __slots__ = ("_run",)

    def __init__(self, run: _Held) -> None:
        self._run = run

    def continue_from(self, captured: dict[str, Any], *, step: int, seq: int, usage: Usage, source: str,
                      ref_loader: Callable[[str], str | None] | None = None) -> None:
        """See :meth:`Run.continue_from <harness_lab.loop.run.Run.continue_from>`."""
        run = self._run
        run.step_no, run._seq, run.usage = step, seq, usage
        run.gates.started_at = run.clock.now() - usage.elapsed_s
        self.restore(captured, source=source, ref_loader=ref_loader)
        if run.repair is not None:  # not in restore(): a rollback is one of the policy's own moves
            run.repair.restore(captured.get("repair"), {s.id for s in run.sandbox.snapshots()})

    def capture(self, *, context: bool = True) -> dict[str, Any]:
        """See :meth:`Run.capture <harness_lab.loop.run.Run.capture>`."""
        run = self._run
        held = self.capture_compact()
        captured: dict[str, Any] = {"state": run.state.value}
        for key in _CAPTURED:
            captured[key] = held[key] if key in held else _empty(RUN_STATE_EMPTY[key])
        if context:
            captured["context"] = run.context.state()
        return captured

    def capture_compact(self) -> dict[str, Any]:
        """See :meth:`Run.capture_compact <harness_lab.loop.run.Run.capture_compact>`."""
        run = self._run
        held: dict[str, Any] = {}
        if run.stop_reason is not None:
            held["stop_reason"] = run.stop_reason.model_dump(mode="json")
        if run.executor.observed:
            held["observed"] = dict(run.executor.observed)
        # mid-step, the gates have already counted the in-flight proposal: record them as before it
        held["gates"] = run.gates.state(run._gates_at_start if run._in_flight is not None else None)
        if _stateful(run.proposer) and (proposer := run.proposer.state()) is not None:
            held["proposer"] = proposer
        if run.receipt is not None:
            held["receipt"] = run.receipt.model_dump(mode="json")
        if run.waiting is not None:
            held["waiting"] = run.waiting.model_dump(mode="json")
        if (pending := run._pending or run._in_flight) is not None:
            held["pending"] = pending.raw
        if run.repair is not None and (repair := run.repair.state()) is not None:
            held["repair"] = repair
        if (attempts := run.failed_attempts.state()) is not None:
            held["attempts"] = attempts
        return held

    def restore(self, captured: dict[str, Any], *, source: str,
                ref_loader: Callable[[str], str | None] | None = None) -> None:
        """See :meth:`Run.restore <harness_lab.loop.run.Run.restore>`."""
        run = self._run
        run.state = RunState(captured["state"])
        run.stop_reason = StopReason.model_validate(captured["stop_reason"]) if captured["stop_reason"] else None
        run.executor.observed = dict(captured["observed"])
        # Keep the summarizer in use (a fault may have swapped it in): state() holds data, not code.
        run.context = ContextManager.from_state(captured["context"], summarizer=run.context.summarizer,
                                                ref_loader=ref_loader)
        run.gates.restore(captured["gates"])
        if captured["proposer"] is not None and isinstance(run.proposer, StatefulProposer):
            run.proposer.restore(captured["proposer"])
        run.receipt = Receipt.model_validate(captured["receipt"]) if captured["receipt"] else None
        run.accepted_bytes = None if run.receipt is None else run.accepted_bytes
        run.waiting = ApprovalRequest.model_validate(captured["waiting"]) if captured["waiting"] else None
        run.failed_attempts = FailedAttempts.from_state(captured.get("attempts"))  # older captures lack it
        run._pending = parse_proposal(captured["pending"]) if captured["pending"] is not None else None
        # The endpoint is asked afresh: a failure seen before the restore belongs to the abandoned line.
        run._failed_ask, run._endpoint_failures, run._parked_on_endpoint = None, 0, False
        run._emit(Restored, source=source, state=run.state)


@dataclass(slots=True)
class _Counters:
    """What the run used, counted where it is spent. Mutable inside the run (the gates read them
    mid-step); the frozen :class:`Usage` is made only when someone reads ``RunBase.usage``."""

    decisions: int = 0
    tool_calls: int = 0
    tokens: int = 0
    elapsed_s: float = 0.0


def _stateful(proposer: Proposer) -> TypeGuard[StatefulProposer]:
    # isinstance(proposer, StatefulProposer), which costs ~10 µs (capture() runs every step): the
    # same test Python 3.11 makes for a runtime-checkable protocol's methods.
    # Unrolled: all() over a generator costs three times as much.
    return (getattr(proposer, "propose", None) is not None and getattr(proposer, "state", None) is not None
            and getattr(proposer, "restore", None) is not None)


# capture()'s entries after ``state``, in the order a snapshot or checkpoint holds them.
_CAPTURED = ("stop_reason", "observed", "gates", "proposer", "receipt", "waiting", "pending", "repair", "attempts")


def _empty(value: Any) -> Any:
    return {} if value == {} else value  # a fresh dict each time: the caller may change it
