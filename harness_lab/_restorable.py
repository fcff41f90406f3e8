"""The run's restorable state: what it used (``usage``, counted in :class:`_Counters`) and
``capture`` / ``restore`` / ``continue_from``, which snapshots, checkpoints, rollback, resume and forks share.

:class:`~harness_lab._run_base.RunBase` builds on this; read :mod:`harness_lab.run` first.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeGuard

from ._step_records import usage
from .approval import ApprovalRequest
from .checkpoint_record import RUN_STATE_EMPTY
from .clock import Clock
from .context import ContextManager
from .events import Event, Restored, StopReason, Usage
from .executor import ToolExecutor
from .gates import GatesMark, LoopGates
from .proposal import Proposal, parse_proposal
from .proposers.base import EndpointFailure, Proposer, StatefulProposer
from .repair import RepairPolicy
from .sandbox import Sandbox
from .states import RunState
from .stop_rules import FailedAttempts
from .validation import Receipt

__all__ = ["Restorable"]


class Restorable:
    """The part of a run a snapshot or checkpoint holds, and how it is taken and put back."""

    # Set by RunBase.__init__ (and the step loop); declared here for the methods below.
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
    _used: _Counters
    _usage: Usage | None
    _pending: Proposal | None
    _failed_ask: EndpointFailure | None
    _endpoint_failures: int
    _parked_on_endpoint: bool
    _in_flight: Proposal | None
    _gates_at_start: GatesMark | None

    def continue_from(self, captured: dict[str, Any], *, step: int, seq: int, usage: Usage, source: str,
                      ref_loader: Callable[[str], str | None] | None = None) -> None:
        """Resume and fork entry: unlike a rollback, the step counters come from the checkpoint too."""
        self.step_no, self._seq, self.usage = step, seq, usage
        self.gates.started_at = self.clock.now() - usage.elapsed_s
        self.restore(captured, source=source, ref_loader=ref_loader)
        if self.repair is not None:  # not in restore(): a rollback is one of the policy's own moves
            self.repair.restore(captured.get("repair"), {s.id for s in self.sandbox.snapshots()})

    @property
    def usage(self) -> Usage:
        """What the run used so far, as a frozen record (made again when read after a counter moved)."""
        used, made = self._used, self._usage
        if (made is None or made.decisions != used.decisions or made.tool_calls != used.tool_calls
                or made.tokens != used.tokens or made.elapsed_s != used.elapsed_s):
            made = self._usage = usage(used.decisions, used.tool_calls, used.tokens, used.elapsed_s)
        return made

    @usage.setter
    def usage(self, value: Usage) -> None:
        self._used = _Counters(value.decisions, value.tool_calls, value.tokens, value.elapsed_s)
        self._usage = value

    def capture(self, *, context: bool = True) -> dict[str, Any]:
        """The run's restorable state (for snapshots and checkpoints); JSON-able, no secrets.
        ``context=False`` leaves the context out (a checkpoint writes it as a change log)."""
        held = self.capture_compact()
        captured: dict[str, Any] = {"state": self.state.value}
        for key in _CAPTURED:
            captured[key] = held[key] if key in held else _empty(RUN_STATE_EMPTY[key])
        if context:
            captured["context"] = self.context.state()
        return captured

    def capture_compact(self) -> dict[str, Any]:
        """:meth:`capture` without the context, the state, and the entries at their empty value
        (``checkpoint.RUN_STATE_EMPTY``): a checkpoint row's ``run_state``, which
        :class:`~harness_lab.checkpoint.Checkpoint` fills back in. Built every step with a store."""
        held: dict[str, Any] = {}
        if self.stop_reason is not None:
            held["stop_reason"] = self.stop_reason.model_dump(mode="json")
        if self.executor.observed:
            held["observed"] = dict(self.executor.observed)
        # mid-step, the gates have already counted the in-flight proposal: record them as before it
        held["gates"] = self.gates.state(self._gates_at_start if self._in_flight is not None else None)
        if _stateful(self.proposer) and (proposer := self.proposer.state()) is not None:
            held["proposer"] = proposer
        if self.receipt is not None:
            held["receipt"] = self.receipt.model_dump(mode="json")
        if self.waiting is not None:
            held["waiting"] = self.waiting.model_dump(mode="json")
        if (pending := self._pending or self._in_flight) is not None:
            held["pending"] = pending.raw
        if self.repair is not None and (repair := self.repair.state()) is not None:
            held["repair"] = repair
        if (attempts := self.failed_attempts.state()) is not None:
            held["attempts"] = attempts
        return held

    def restore(self, captured: dict[str, Any], *, source: str,
                ref_loader: Callable[[str], str | None] | None = None) -> None:
        """Set the run to a captured state (rollback, fork, resume); budget already spent stays spent.
        The repair policy's state is left as it is (resume and fork set it: :meth:`continue_from`)."""
        self.state = RunState(captured["state"])
        self.stop_reason = StopReason.model_validate(captured["stop_reason"]) if captured["stop_reason"] else None
        self.executor.observed = dict(captured["observed"])
        # Keep the summarizer in use (a fault may have swapped it in): state() holds data, not code.
        self.context = ContextManager.from_state(captured["context"], summarizer=self.context.summarizer,
                                                 ref_loader=ref_loader)
        self.gates.restore(captured["gates"])
        if captured["proposer"] is not None and isinstance(self.proposer, StatefulProposer):
            self.proposer.restore(captured["proposer"])
        self.receipt = Receipt.model_validate(captured["receipt"]) if captured["receipt"] else None
        self.accepted_bytes = None if self.receipt is None else self.accepted_bytes
        self.waiting = ApprovalRequest.model_validate(captured["waiting"]) if captured["waiting"] else None
        self.failed_attempts = FailedAttempts.from_state(captured.get("attempts"))  # older captures lack it
        self._pending = parse_proposal(captured["pending"]) if captured["pending"] is not None else None
        # The endpoint is asked afresh: a failure seen before the restore belongs to the abandoned line.
        self._failed_ask, self._endpoint_failures, self._parked_on_endpoint = None, 0, False
        self._emit(Restored, source=source, state=self.state)

    # -- the part restore uses: RunBase's ---------------------------------------------------------
    def _emit(self, event_type: Callable[..., Event], **fields: Any) -> None:
        raise NotImplementedError


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
