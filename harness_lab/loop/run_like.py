"""What the persistence side (checkpoints, resume, fork, heartbeat, repair, time travel) reads and
writes of a run, as a :class:`typing.Protocol`, so that those modules never import :mod:`harness_lab.loop.run`:
the arrows go one way, run -> persistence -> this module (tests/test_import_graph.py fails on any cycle).

:class:`~harness_lab.loop.run.Run` satisfies it structurally (mypy checks that wherever a ``Run`` is passed).
The members typed by a persistence module itself extend it there: ``checkpoints`` in
:class:`harness_lab.persistence.checkpoint.CheckpointedRun`, ``resume_report`` in :class:`harness_lab.persistence.resume.ResumableRun`
(:mod:`harness_lab.loop.repair`, imported here, types the little it reads of a run by its own protocol). Where a persistence module makes a run (resume, fork, ``Run.open``)
it is given the class to make (``type(run)`` or ``cls``), never imports it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from ..clock import Clock
from ..context import ContextManager
from ..contract import ControlContract
from ..evidence import EvidenceCatalogue
from ..faults import CrashPoint
from ..proposers.base import Proposer
from ..records.events import Event, StepRecord, StopReason, Usage
from ..records.states import RunState
from ..sandbox import Sandbox
from ..sandbox.policy import Isolation
from ..validation import Receipt
from .approval import ApprovalRequest, Approver
from .executor import ToolExecutor
from .gates import LoopGates
from .record_log import RecordLog
from .repair import RepairPolicy
from .stop_rules import FailedAttempts
from .triggers import TriggerTest

__all__ = ["RunLike"]


class RunLike(Protocol):
    """The run as the persistence side sees it (see the module docstring)."""

    run_id: str
    contract: ControlContract
    proposer: Proposer
    evidence: EvidenceCatalogue
    approver: Approver
    clock: Clock
    validation: bool
    isolation: Isolation
    trigger_checks: Mapping[str, TriggerTest]
    workspace: Path
    sandbox: Sandbox
    executor: ToolExecutor
    context: ContextManager
    gates: LoopGates
    state: RunState
    stop_reason: StopReason | None
    step_no: int
    usage: Usage
    records: RecordLog[StepRecord]  # old entries packed when no store holds them
    events: RecordLog[Event]
    receipt: Receipt | None
    waiting: ApprovalRequest | None
    failed_attempts: FailedAttempts
    scenario: str | None
    repair: RepairPolicy | None
    read_only: str | None
    closed: bool
    crashed: CrashPoint | None
    # The run's own bookkeeping that resume, fork and Run.open carry over (kept private on Run).
    _seq: int
    _ws_hash: str | None
    _travel_store: Any  # the store Run.open read it from (persistence's Store: loop/ never imports store/)
    _travel_store_owned: bool

    def step(self) -> StepRecord: ...
    def halt(self, code: str, message: str) -> StepRecord: ...
    def close(self) -> None: ...
    def keep_workspace(self) -> None: ...
    @property
    def step_due(self) -> bool: ...
    def capture(self, *, context: bool = True) -> dict[str, Any]: ...
    def capture_compact(self) -> dict[str, Any]: ...
    def restore(self, captured: dict[str, Any], *, source: str,
                ref_loader: Callable[[str], str | None] | None = None) -> None: ...
    def continue_from(self, captured: dict[str, Any], *, step: int, seq: int, usage: Usage, source: str,
                      ref_loader: Callable[[str], str | None] | None = None) -> None: ...
    def _emit(self, event_type: Callable[..., Event], **fields: Any) -> None: ...
    def _crash_why(self) -> str: ...
