"""The run's bookkeeping: construction, the one state-changing function, the trace, crashes and
interrupts, what the run used (``usage``); the restorable state (``capture`` / ``restore``) is the
:class:`~harness_lab.loop._restorable.RunImage` it owns (``self.image``), which those methods delegate to.

:class:`~harness_lab.loop.run.Run` adds the step loop on top; read that module first.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
import weakref
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

from ..checkpoint import Checkpointer
from ..clock import Clock, SystemClock
from ..contract import ControlContract
from ..errors import ConfigError, RunStateError, WorkspaceError
from ..evidence import EvidenceCatalogue
from ..faults import CrashPoint, FaultSchedule
from ..persistence.process_id import process_identity
from ..proposers.base import EndpointFailure, Proposer
from ..records.effect_classes import effect_class
from ..records.events import (
    Decision,
    Event,
    Note,
    StateChanged,
    StepRecord,
    StopReason,
    Usage,
)
from ..records.proposal import Proposal
from ..records.states import RunState, can_transition
from ..records.tools import ToolResult
from ..sandbox import Sandbox, SandboxPolicy
from ..sandbox.command import check_isolation, check_network_allow
from ..sandbox.policy import Isolation, isolation_at_least
from ..store import Store
from ..validation import Receipt, Verdict, sha256_hex
from ._context_tools import context_action
from ._restorable import RunImage, _Counters
from ._run_setup import initial_context
from ._step_records import step_record, usage
from .approval import ApprovalRequest, Approver, AskHuman
from .executor import ExternalEffects, Outbox, ToolExecutor
from .gates import GatesMark, LoopGates
from .record_log import RecordLog, trace_logs
from .repair import RepairPolicy
from .stop_rules import FailedAttempts
from .triggers import DEFAULT_TRIGGER_CHECKS, TriggerTest, check_trigger

if TYPE_CHECKING:
    from ..persistence.resume import ResumeReport
    from .run_like import RunLike

__all__ = ["RunBase"]

_R = TypeVar("_R", bound="RunBase")


class RunBase:
    """State, trace and restorable state of a run; the step loop lives in :class:`Run`."""

    step_no: int  # declared before __init__ sets it: the executor's context tool reads it

    def __init__(
        self,
        *,
        contract: ControlContract,
        proposer: Proposer,
        evidence: EvidenceCatalogue,
        workspace: str | Path | None = None,
        validation: bool = True,
        approver: Approver | None = None,
        clock: Clock | None = None,
        effects: ExternalEffects | None = None,
        run_id: str = "run",
        resume: bool = False,
        repair: RepairPolicy | None = None,
        store: Store | None = None,
        isolation: Isolation = "auto",
        trigger_checks: Mapping[str, TriggerTest] | None = None,
    ) -> None:
        self.contract, self.proposer, self.evidence, self.validation = contract, proposer, evidence, validation
        # The checks trigger.still_valid may name (harness_lab.loop.triggers); a bad name is refused here.
        self.trigger_checks = DEFAULT_TRIGGER_CHECKS if trigger_checks is None else trigger_checks
        check_trigger(contract.trigger, self.trigger_checks)
        # What commands run in: the caller's choice, at least what the contract demands. Checked before
        # anything is made, so a machine without it refuses the run in one line, before its first step.
        try:
            self.isolation: Isolation = isolation_at_least(contract.sandbox.isolation, isolation)
        except ValueError as exc:
            raise ConfigError(f"contract {contract.name!r}: {exc}") from None
        check_network_allow(contract.sandbox.network_allow, check_isolation(self.isolation, os.geteuid()))
        self._isolation_noted = False  # the note that commands run without a namespace, once per process
        self.run_id = run_id
        self.repair = repair  # None: plain feedback loops (seed 004's table); see harness_lab.loop.repair
        # Directories the run made itself are removed by close(); a caller's workspace never is.
        self._owned_dirs: list[Path] = []
        # A temporary workspace nobody can find once the run is gone goes with it, unless a store holds the
        # run (resume continues in it): Checkpointer detaches this finalizer (keep_workspace).
        self._workspace_finalizer: weakref.finalize[..., Any] | None = None
        if workspace is None:
            workspace = tempfile.mkdtemp(prefix="harness-lab-ws-")
            self._owned_dirs.append(Path(workspace))
            self._workspace_finalizer = weakref.finalize(self, shutil.rmtree, workspace, True)
        self.workspace = Path(workspace)
        self.workspace.mkdir(parents=True, exist_ok=True)
        if not resume and (self.workspace / contract.verification.report.path).exists():
            raise WorkspaceError(
                f"{self.workspace}: already holds a draft {contract.verification.report.path}; "
                "start a new run in a fresh directory, or resume the old run explicitly"
            )
        self.approver: Approver = approver or AskHuman()
        self.image = RunImage(self)  # capture / restore / continue_from (snapshots, checkpoints, resume, fork)
        self.clock: Clock = clock or SystemClock()
        self.context = initial_context(contract, evidence)
        self.gates = LoopGates(contract.budget, self.clock)
        snapshot_dir = _snapshot_dir()
        self._owned_dirs.append(snapshot_dir)
        # Snapshots live only in this process (a resumed run starts new ones): a run dropped without
        # close() must not leave them behind in the temporary folder, one folder per run ever made.
        weakref.finalize(self, shutil.rmtree, snapshot_dir, True)
        self.sandbox = Sandbox(self.workspace, policy=SandboxPolicy(
                                   isolation=self.isolation, network_allow=contract.sandbox.network_allow),
                               snapshot_dir=snapshot_dir, state_provider=self.capture)
        self.executor = ToolExecutor(
            self.sandbox, evidence, contract.verification.report.path,
            lambda ref, start, end: self.context.read_ref(ref, start, end), effects or Outbox(),
            context_tool=lambda action: context_action(self.context, action, self.step_no),
        )
        self.state: RunState = RunState.CREATED
        self.stop_reason: StopReason | None = None
        self._used = _Counters()
        self._usage: Usage | None = None
        self.step_no = 0
        # Without a store the oldest entries are packed (harness_lab.loop.record_log); read as lists.
        self.records: RecordLog[StepRecord]
        self.events: RecordLog[Event]
        self.records, self.events = trace_logs(pack=store is None)
        self.receipt: Receipt | None = None
        self.accepted_bytes: bytes | None = None
        self.waiting: ApprovalRequest | None = None
        self.failed_attempts = FailedAttempts()  # what the contract's stop.failure rule counts
        self._pending: Proposal | None = None
        # The proposer's endpoint failed when `pending` asked: the next step records it (see Run._endpoint_failed).
        self._failed_ask: EndpointFailure | None = None
        self._endpoint_failures = 0  # in a row, in this process: a resumed run asks again afresh
        self._parked_on_endpoint = False  # run() stops here; an explicit step() asks the endpoint again
        # The proposal of the step under way: a snapshot taken mid-step (before an irreversible call)
        # records it as pending, so rolling back to "before X" puts X back in front of the caller.
        self._in_flight: Proposal | None = None
        self._gates_at_start: GatesMark | None = None
        self._step_events: list[Event] = []
        self._seq = 0
        self._faults = FaultSchedule(lambda topic, message, data: self._emit(Note, topic=topic, message=message, data=data))
        self.crashed: CrashPoint | None = None
        self._crash_cause = "simulated"  # or how a real interrupt struck (see _crash_on_interrupt)
        self._ws_hash: str | None = None  # the workspace as the last step left it
        self.scenario: str | None = None  # set by from_scenario: resume rebuilds the run from it
        # With a store, every step is checkpointed; only a window of the trace stays in memory.
        # A RunBase is only ever made as a Run (its step loop completes the protocol checkpoints read).
        run = cast("RunLike", self)
        self.checkpoints = Checkpointer(store, run, fresh=not resume) if store is not None else None
        self.resume_report: ResumeReport | None = None  # what Run.resume checked, in the seed's order
        # Run.open: a stored run reopened for inspection only (what it refuses says why); its store, read-only.
        self.read_only: str | None = None
        self._travel_store: Store | None = None
        self._travel_store_owned = False  # Run.open opened it from a path: close() closes it
        self.closed = False

    # -- the restorable state (its image) and what the run used ------------------------------------
    def capture(self, *, context: bool = True) -> dict[str, Any]:
        """The run's restorable state (for snapshots and checkpoints); JSON-able, no secrets.
        ``context=False`` leaves the context out (a checkpoint writes it as a change log)."""
        return self.image.capture(context=context)

    def capture_compact(self) -> dict[str, Any]:
        """:meth:`capture` without the context, the state, and the entries at their empty value
        (``checkpoint.RUN_STATE_EMPTY``): a checkpoint row's ``run_state``, which
        :class:`~harness_lab.checkpoint.Checkpoint` fills back in. Built every step with a store."""
        return self.image.capture_compact()

    def restore(self, captured: dict[str, Any], *, source: str,
                ref_loader: Callable[[str], str | None] | None = None) -> None:
        """Set the run to a captured state (rollback, fork, resume); budget already spent stays spent.
        The repair policy's state is left as it is (resume and fork set it: :meth:`continue_from`)."""
        self.image.restore(captured, source=source, ref_loader=ref_loader)

    def continue_from(self, captured: dict[str, Any], *, step: int, seq: int, usage: Usage, source: str,
                      ref_loader: Callable[[str], str | None] | None = None) -> None:
        """Resume and fork entry: unlike a rollback, the step counters come from the checkpoint too."""
        self.image.continue_from(captured, step=step, seq=seq, usage=usage, source=source, ref_loader=ref_loader)

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

    def close(self) -> None:
        """Release the sandbox and remove the temporary directories this run created."""
        self.closed = True
        if self._travel_store_owned and self._travel_store is not None:
            self._travel_store.close()
            self._travel_store_owned = False
        self.sandbox.close()
        for path in self._owned_dirs:
            shutil.rmtree(path, ignore_errors=True)
        self._owned_dirs = []

    def keep_workspace(self) -> None:
        """Keep a temporary workspace the run made after the run is collected (a store's run resumes in
        it); close() still removes it."""
        if self._workspace_finalizer is not None:
            self._workspace_finalizer.detach()

    def __enter__(self: _R) -> _R:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _crash_point(self, point: CrashPoint) -> None:
        if self._faults.armed and (crash := self._faults.crash(self, point)) is not None:
            self.crashed = point
            raise crash

    @property
    def crash_cause(self) -> str | None:
        """Why the run crashed: ``"simulated"`` (the process_crash fault) or ``"interrupted: <type>"``
        (a Ctrl-C mid-step); None while it has not crashed."""
        return self._crash_cause if self.crashed is not None else None

    def _crash_on_interrupt(self, exc: BaseException, point: CrashPoint, tool: str | None,
                            during: str = "execute") -> None:
        """A Ctrl-C (any BaseException that is not an Exception) at ``point`` of a step, ``during``
        one of its parts (execute, observe, validate, close): as a crash there, the run refuses further
        steps and the step stays unrecorded. An effect's outcome is unknown, so it must not be repeated
        blindly: with a store, ``Run.resume`` decides from the ledger, as after kill -9. The caller re-raises."""
        if isinstance(exc, Exception) or self.crashed is not None:
            return  # a tool's error is the executor's to report; a simulated crash is already recorded
        self.crashed, self._crash_cause = point, f"interrupted: {type(exc).__name__}"
        self._emit(Note, topic="interrupted",
                   message=f"{self._crash_why()} during {during} ({tool or 'no action'}) of step {self.step_no}; "
                           "the step is unrecorded and its outcome unknown: resume from a checkpoint",
                   data={"point": point.value, "tool": tool, "interrupt": type(exc).__name__, "during": during})
        self._faults.abandon(f"the run was interrupted at {point.value} of step {self.step_no}")

    def _crash_why(self) -> str:
        assert self.crashed is not None
        return f"crashed at {self.crashed.value} ({self._crash_cause})"

    # -- bookkeeping ----------------------------------------------------------------------------
    def _refuse_if_read_only(self) -> None:
        if self.read_only is not None:
            raise RunStateError(f"run {self.run_id} was {self.read_only}: resume it to continue")

    def _open_step(self) -> None:
        self._refuse_if_read_only()
        if self.crashed is not None:
            raise RunStateError(f"run {self.run_id} {self._crash_why()}; resume from a checkpoint")
        if self.state.terminal:
            raise RunStateError(f"run {self.run_id} is {self.state.value} ({self.stop_reason.code if self.stop_reason else '?'}); it takes no more steps")
        self.gates.start()
        self.step_no += 1
        self._before = self.state
        if self.state is RunState.CREATED:
            self._transition(RunState.RUNNING, "run started")

    def _abandon_step(self) -> None:
        """Undo a step that nothing was decided in (a Ctrl-C in the proposer): its number, state
        change and events go, so the next step is the same step again. What it saw of the world
        stays: an outside change is already folded into the context, so its note is kept, once,
        for the next step's record (as a note emitted between steps is)."""
        buffered, mine = self._step_events, 0
        while mine < len(buffered) and buffered[-1 - mine].step == self.step_no:
            mine += 1
        undone = buffered[len(buffered) - mine:]
        if mine:
            del buffered[-mine:]
            del self.events[-mine:]
        self._seq -= mine
        self.step_no -= 1
        self.state = self._before  # an undo, not a change: its StateChanged event went with the step
        for event in undone:
            if isinstance(event, Note) and event.topic in _KEPT_WHEN_ABANDONED:
                self._emit(Note, topic=event.topic, message=event.message, data=event.data)

    def _close(self, proposal: Proposal | None, decision: Decision, *, result: ToolResult | None = None,
               verdict: Verdict | None = None, stop: StopReason | None = None) -> StepRecord:
        self._in_flight = None  # the step is settled: its proposal is history, not pending
        # A Ctrl-C in here leaves the step decided (and its effect, if any, carried out) but unrecorded,
        # with the state maybe moved on: too much to undo by hand, so it is a crash (_crash_on_interrupt),
        # after the effect if one ran, else before it; from the commit on, before the commit (with a
        # store, whether the row landed is the store's to say: resume reads it). The tries cost nothing.
        try:
            if stop is not None:
                target = _STOPPED_IN.get(decision.verdict, RunState.BLOCKED)
                self._transition(target, stop.message)
                self.stop_reason = stop
            elif decision.verdict == "park":
                self._transition(RunState.WAITING_FOR_HUMAN, decision.reason)
                # Checkpoint first, never act then ask: the snapshot holds the waiting request.
                gate = self.sandbox.snapshot(label=f"gate before step {self.step_no + 1}")
                self._emit(Note, topic="gate_checkpoint", message=f"checkpoint {gate.id} before asking a human",
                           data={"snapshot": gate.id})
            if self._faults.fired:  # the usual step: no fault fired, nothing to answer
                self._faults.settle(self, decision, result)
            if self._faults.armed and self.state.terminal:
                self._faults.expire(self.step_no, self.state)
            if result is None or proposal is None or proposal.action is None or effect_class(proposal.action) != "read":
                # Fold in what this step wrote. After a pure tool there is nothing of the run's to fold
                # in: the hash stays as the step found it, so an outside write during the step (while
                # the proposer thought, say) is reported by the next step instead of absorbed here.
                self._ws_hash = self.sandbox.workspace_hash()
            self._used.elapsed_s = self.gates.elapsed()
            record = step_record(self.step_no, self._before, self.state, proposal, decision, result, verdict,
                                 self.usage, tuple(self._step_events))
            self._step_events.clear()
        except BaseException as exc:
            landed = result is not None or decision.verdict == "validate"
            self._crash_on_interrupt(exc, CrashPoint.AFTER_EFFECT if landed else CrashPoint.BEFORE_EFFECT,
                                     _kind(proposal), "close")
            raise
        try:
            if self._faults.armed:  # the usual step has no fault armed: no crash point to visit
                self._crash_point(CrashPoint.BEFORE_COMMIT)
            if self.checkpoints is not None:
                self.checkpoints.commit(record, self._ws_hash)
                _keep_window(self.records, self.checkpoints.window)
                _keep_window(self.events, 4 * self.checkpoints.window)
        except BaseException as exc:
            self._crash_on_interrupt(exc, CrashPoint.BEFORE_COMMIT, _kind(proposal), "close")
            raise
        self.records.append(record)
        if self._faults.armed:
            self._crash_point(CrashPoint.AFTER_COMMIT)
        return record

    def _transition(self, after: RunState, reason: str) -> None:
        """The one place the run's state changes; every change is an event."""
        if not can_transition(self.state, after):
            raise RunStateError(f"illegal transition {self.state.value} -> {after.value}")
        before, self.state = self.state, after
        self._emit(StateChanged, before=before, after=after, reason=reason)

    def _emit(self, event_type: Callable[..., Event], **fields: Any) -> None:
        self._append(event_type(seq=self._next_seq(), step=self.step_no, **fields))

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def _append(self, event: Event) -> None:
        self._step_events.append(event)
        self.events.append(event)


def _snapshot_dir() -> Path:
    """A new snapshot folder in the temporary folder, named by this process (its pid and identity: see
    ``process_id``). Only a finalizer removes it, which kill -9 never runs: so the first run of a process
    in a temporary folder removes the folders of this user's processes that are gone (one per run they made)."""
    pid = os.getpid()
    where = tempfile.gettempdir()
    if where not in _SWEPT:
        _SWEPT.add(where)
        _sweep_snapshot_dirs(Path(where))
    if pid not in _OWN_TAG:  # this process's identity is fixed while it lives: /proc is read once per pid
        _OWN_TAG[pid] = _identity_tag(pid)
    return Path(tempfile.mkdtemp(prefix=f"{_SNAPSHOTS}{pid}-{_OWN_TAG[pid]}-"))


def _identity_tag(pid: int) -> str:
    return hashlib.sha256(process_identity(pid).encode()).hexdigest()[:12]


def _sweep_snapshot_dirs(where: Path) -> None:
    try:
        entries = list(os.scandir(where))
    except OSError:
        return  # nothing to sweep where nothing can be listed; mkdtemp says what is wrong with the folder
    for entry in entries:
        if (named := _SNAPSHOT_NAME.match(entry.name)) is None:
            continue
        try:
            mine = entry.is_dir(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_uid == os.geteuid()
        except OSError:
            continue
        if mine and _identity_tag(int(named["pid"])) != named["tag"]:  # its process is gone (or another now)
            shutil.rmtree(entry.path, ignore_errors=True)


_SNAPSHOTS = "harness-lab-snapshots-"
_SNAPSHOT_NAME = re.compile(rf"{_SNAPSHOTS}(?P<pid>\d{{1,10}})-(?P<tag>[0-9a-f]{{12}})-")
_SWEPT: set[str] = set()  # temporary folders this process has swept already
_OWN_TAG: dict[int, str] = {}  # pid -> this process's tag (a child of os.fork has its own pid)


def _keep_window(trace: RecordLog[Any], size: int) -> None:
    """Older entries live in the store; dropping half at a time keeps this O(1) amortized."""
    if len(trace) >= 2 * size:
        del trace[: len(trace) - size]


def _kind(proposal: Proposal | None) -> str | None:
    return proposal.action.kind if proposal is not None and proposal.action is not None else None


def _sha(data: bytes | None) -> str:
    return sha256_hex(data or b"")


# Where a stop leaves the run, by the decision that made it; any other stop is BLOCKED.
_STOPPED_IN = {"exhaust": RunState.EXHAUSTED, "unavailable": RunState.WAITING_FOR_ENDPOINT}

# Notes of an abandoned step that record the world, not the step (see _abandon_step).
_KEPT_WHEN_ABANDONED = ("external_change", "pending_discarded")


