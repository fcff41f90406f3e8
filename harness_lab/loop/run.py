"""A single-steppable run: propose -> gate -> execute -> observe -> validate.

The model only proposes; this module decides. ``step()`` is synchronous and returns one
:class:`~harness_lab.records.events.StepRecord`; ``pending`` shows the next proposal before it executes.

``Run`` is composed, no mixins: it owns its collaborators and its public methods delegate to them:
``run.image`` (capture / restore: :mod:`.image`), ``run.human_gate`` (approve / reject: :mod:`._human_gate`),
``run.finish_check`` (validation: :mod:`._finish_check`), ``run.crash`` (crash points, Ctrl-C mid-step:
:mod:`.crash`), ``run.trace`` (the events: :mod:`.trace`), what it used (:mod:`.counters`), the gates, the
context, the executor and sandbox, the faults; with a store, ``run.checkpoints``, the log it commits each
step to (:class:`~harness_lab.loop.log.RunLog`), from its class's ``source`` (:mod:`.log`; ``harness_lab.Run``
is given the store's: :mod:`harness_lab.persistence.stored`). Nothing here imports persistence.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from ..clock import Clock, SystemClock
from ..context import ContextManager, ContextView
from ..contract import ControlContract, load_contract
from ..errors import ConfigError, RunStateError, WorkspaceError
from ..evidence import EvidenceCatalogue
from ..faults import CrashPoint, Fault, FaultRecord, FaultSchedule, resolve_fault
from ..paths import data_dir
from ..proposers.base import EndpointFailure, Proposer, ProposerOutput
from ..proposers.scripted import ScriptedProposer
from ..records.actions import Finish, ForbiddenAction
from ..records.effect_classes import READ_ACTIONS, effect_class
from ..records.events import Decision, Event, Note, StateChanged, StepRecord, StopReason, Usage
from ..records.proposal import Proposal, parse_proposal
from ..records.states import TERMINAL_STATES, RunState, can_transition
from ..records.tools import ToolResult
from ..sandbox import Sandbox, SandboxPolicy
from ..sandbox.command import check_isolation, check_network_allow
from ..sandbox.policy import Isolation, isolation_at_least
from ..sandbox.snapshots import SnapshotInfo
from ..scenarios import copy_repository, load_scenario, scenario_ref
from ..validation import Receipt, Verdict
from ..validation.semantic import SemanticReviewer
from ._context_tools import context_action
from ._edits import edited_proposal
from ._finish_check import FinishCheck
from ._human_gate import HumanGate
from ._run_setup import initial_context
from ._snapshot_dirs import snapshot_dir as new_snapshot_dir
from ._step_records import proposed, step_record, tool_called
from ._step_tables import KEYED, PLAIN_TOOLS, WORKSPACE_TOOLS, state_key
from .approval import ApprovalRequest, Approver, AskHuman
from .breakpoints import Stops, Until
from .budget import check_budget, spend
from .counters import Counters
from .crash import CrashGuard
from .executor import ExternalEffects, Outbox, ToolExecutor
from .gates import GatesMark, LoopGates
from .image import RunImage
from .log import LogSource, RunLog
from .record_log import RecordLog, trace_logs
from .records import ROLLED_BACK, BudgetChoice, StepPoint, StepView
from .repair import RepairPolicy
from .stop_rules import FailedAttempts
from .trace import Trace
from .triggers import DEFAULT_TRIGGER_CHECKS, TRIGGER_INVALID, TriggerTest, check_trigger, trigger_holds

__all__ = ["Run"]

_R = TypeVar("_R", bound="Run")

# The two decisions most steps make: frozen records, so one instance each serves every step.
_EXECUTE = Decision(verdict="execute", reason="allowed tool call within budget")
_SUBTASK_TOOLS = frozenset({"begin_subtask", "finish_subtask"})
_VALIDATE = Decision(verdict="validate", reason="finish is a claim: validate the artifact")
_WHOLE: object = object()  # edit_pending given no whole proposal (None is a proposal: a malformed one)


class Run:
    """A single-steppable run. ``step()`` reads as propose -> gate -> execute -> observe -> validate."""

    _paused_before: Proposal | None = None  # the pending call a tool breakpoint last stopped run() before

    # Where a store's log and the store-backed operations (resume, open, fork, history, at) come from:
    # none here (loop/ imports no persistence); harness_lab.Run is this run given one (persistence.stored).
    source: ClassVar[LogSource | None] = None

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
        store: Any = None,
        isolation: Isolation = "auto",
        trigger_checks: Mapping[str, TriggerTest] | None = None,
        context: ContextManager | None = None,
    ) -> None:
        """``context``: what the run starts with instead of its initial context (L0 and L1): a fork
        restoring a stored context at once passes an empty one, not to build what it replaces."""
        source = self._log_source() if store is not None else None  # refused before anything is made
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
        # The collaborators (no mixins): capture / restore, the human gate, validation.
        self.image = RunImage(self)
        self.human_gate = HumanGate(self, execute=self._execute, observe=self._observe,
                                    check_external_change=self._check_external_change)
        self.finish_check = FinishCheck(self, self.rollback)
        self.clock: Clock = clock or SystemClock()
        self.context = initial_context(contract, evidence) if context is None else context
        self.gates = LoopGates(contract.budget, self.clock)
        # Made by the sandbox when it first keeps a snapshot or blob (a fork or a stored run may never).
        snapshot_dir = new_snapshot_dir(make=False)
        self._owned_dirs.append(snapshot_dir)
        # Snapshots live only in this process (a resumed run starts new ones): a run dropped without
        # close() must not leave them behind in the temporary folder, one folder per run ever made.
        weakref.finalize(self, shutil.rmtree, snapshot_dir, True)
        self.sandbox = Sandbox(self.workspace, policy=SandboxPolicy(
                                   isolation=self.isolation, network_allow=contract.sandbox.network_allow),
                               snapshot_dir=snapshot_dir, state_provider=self.capture, snapshot_dir_new=True)
        self.executor = ToolExecutor(
            self.sandbox, evidence, contract.verification.report.path,
            lambda ref, start, end: self.context.read_ref(ref, start, end), effects or Outbox(),
            context_tool=lambda action: context_action(self.context, action, self.step_no),
        )
        self.state: RunState = RunState.CREATED
        self.stop_reason: StopReason | None = None
        self._used = Counters()  # what the run used (run.usage)
        self.step_no = 0
        # Without a store the oldest entries are packed (harness_lab.loop.record_log); read as lists.
        self.records: RecordLog[StepRecord]
        self.events: RecordLog[Event]
        self.records, self.events = trace_logs(pack=store is None)
        self.trace = Trace(self.events)  # the events, numbered; those of the step under way
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
        note = self._note
        self._faults = FaultSchedule(note)
        self.crash = CrashGuard(self._faults, self, note)  # crash points, and a Ctrl-C mid-step as a crash
        self._ws_hash: str | None = None  # the workspace as the last step left it
        self.scenario: str | None = None  # set by from_scenario: resume rebuilds the run from it
        # With a store, every step is checkpointed; only a window of the trace stays in memory.
        self.checkpoints: RunLog | None = source.open_log(store, self, fresh=not resume) if source else None
        self.resume_report: Any = None  # what Run.resume checked, in the seed's order (persistence's ResumeReport)
        # Run.open: a stored run reopened for inspection only (what it refuses says why); its store, read-only.
        self.read_only: str | None = None
        self._travel_store: Any = None  # the store Run.open read it from (persistence's)
        self._travel_store_owned = False  # Run.open opened it from a path: close() closes it
        self.closed = False

    @classmethod
    def _log_source(cls) -> LogSource:
        if cls.source is None:
            raise ConfigError(f"{cls.__module__}.{cls.__qualname__} has no persistence (a store, resume, open, "
                              "fork, time travel): use harness_lab.Run")
        return cls.source

    @property
    def reviewer(self) -> SemanticReviewer | None:
        """The goal layer's judge: set it (``run.reviewer = EvidenceSupportReviewer()``) to review each
        finish whose format passed; a resumed or forked run starts without one."""
        return self.finish_check.reviewer

    @reviewer.setter
    def reviewer(self, value: SemanticReviewer | None) -> None:
        self.finish_check.reviewer = value

    # -- the caller drives -------------------------------------------------------------------
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
        return self.human_gate.approve(by=by, args_sha256=args_sha256, edited=edited)

    def reject(self, reason: str, *, by: str = "human") -> StepRecord:
        """Refuse the parked proposal: the run stops safely, with the reason kept."""
        return self.human_gate.reject(reason, by=by)

    @property
    def gate_expired(self) -> bool:
        """A human gate waits past its timeout: approving is too late, the next step closes it
        (human_timeout, BLOCKED). Reads the clock only while a gate with a timeout waits."""
        return self.human_gate.gate_expired

    @property
    def step_due(self) -> bool:
        """Whether ``run()`` (and ``harness-lab run --db``'s loop) takes another step: not after the end,
        and not while a human decides, unless the gate's timeout passed (the step closes it); not right
        after the model's endpoint failed too often (a later ``step()`` or a resume asks it again)."""
        return self.human_gate.step_due

    @property
    def pending(self) -> Proposal | None:
        """The next proposal, inspectable before it executes (asks the proposer at most once);
        None when the run takes no more steps (terminal, or crashed), or when the proposer's endpoint
        failed (the next step records the failure)."""
        if self.state.terminal or self.crashed is not None:
            return None
        if self.read_only is not None:  # what the store holds; the proposer is not asked
            return self._pending
        if (self.waiting is None and self._pending is None and self._failed_ask is None
                and self.gates.before_decision(self._used) is None):
            asked = self._ask_proposer()
            if isinstance(asked, EndpointFailure):
                self._failed_ask = asked  # the next step records it; the model proposed nothing
            else:
                self._pending = asked
        return self._pending

    def edit_pending(self, raw: object = _WHOLE, *, by: str = "human", args: Mapping[str, object] | None = None,
                     **fields: object) -> Proposal:
        """Replace the pending proposal before it executes (a debugging edit, recorded in the trace):
        ``edit_pending(raw)`` with a whole new proposal, or field by field keeping the tool:
        ``edit_pending(text="# Report ...")`` / ``edit_pending(args={"text": ...})`` (text as text, not
        JSON). A field the tool does not take, or a value of the wrong type: one line naming it, the
        pending call unchanged. Refused while a human gate waits: what is approved must be exactly what
        was requested (``approve(edited=...)`` approves with changes)."""
        self._refuse_if_read_only()
        if self.waiting is not None:
            raise RunStateError(f"run {self.run_id} waits for a human on this proposal: approve, "
                                "approve(edited=...) or reject it")
        self.crash.refuse(self.run_id)
        structured = args is not None or bool(fields)
        if structured == (raw is not _WHOLE):
            raise RunStateError("edit_pending: give a whole proposal or fields to replace (args=... or name=value), "
                                "one of the two")
        if args is not None and not isinstance(args, Mapping):
            raise RunStateError(f"edit_pending: args: a mapping of field -> value, got {type(args).__name__}")
        changes = {**(args or {}), **fields}
        before = self.pending
        if before is None:
            raise RunStateError(f"run {self.run_id} is {self.state.value}: no pending proposal to edit")
        self._pending = edited_proposal(before, changes, what="edit_pending") if structured else parse_proposal(raw)
        if self._paused_before is before:  # stopped at a breakpoint, edited: continuing executes the edit
            self._paused_before = self._pending
        self._emit(Note, topic="pending_edited", message=f"pending proposal edited by {by}",
                   data={"before": before.raw, "after": self._pending.raw, "by": by})
        return self._pending

    def step(self) -> StepRecord:
        """One decision: propose -> gate -> execute -> observe -> validate."""
        if (early := self._preflight()) is not None:  # a stop before any proposal (trigger, gate timeout, budget)
            return early
        proposal = self._propose()  # the pending proposal, or the proposer's answer
        if isinstance(proposal, StepRecord):  # the proposer failed: the step closed with it
            return proposal
        decision, stop = self._gate(proposal)  # the gates, then the human gate
        self.trace.add(proposed, self.step_no, proposal, decision)
        result = self._execute(proposal) if decision.verdict == "execute" else None
        self._observe(proposal, decision, result)
        verdict = self.finish_check.validate_step() if decision.verdict == "validate" else None
        return self._close(proposal, decision, result=result, verdict=verdict, stop=stop)

    def run(self, *, until: Until = None, max_steps: int | None = None) -> RunState:
        """Step until a terminal state, a human gate, ``until``, or ``max_steps`` steps. ``until``: a
        RunState (stop once in it), a :class:`~harness_lab.timeline.Breakpoint` (a tool one stops with the
        matching call pending, not executed; the others after the step that meets them), a callable
        given each StepRecord (stop when true), or a list of these."""
        stops, taken = Stops(until, step_no=self.step_no), 0
        while self.step_due and not stops.in_state(self.state):  # a gate past its timeout is closed by the step
            if max_steps is not None and taken >= max_steps:
                break
            if (held := stops.before(self, self._paused_before)) is not None:
                self._paused_before = held  # calling run() again executes it: a debugger's "continue"
                break
            record = self.step()
            taken += 1
            if stops.after(self, record):
                break
        return self.state

    @classmethod
    def from_scenario(
        cls: type[_R],
        name: str,
        *,
        validation: bool = True,
        workspace: str | Path | None = None,
        approver: Approver | None = None,
        clock: Clock | None = None,
        run_id: str | None = None,
        store: Any = None,
        proposer: Proposer | None = None,
        isolation: Isolation = "auto",
    ) -> _R:
        """A run of a shipped scenario (``data/scenarios/<name>.yaml``) with its scripted proposer, or
        with ``proposer`` (a model, say) on the scenario's contract and evidence instead of its script.
        ``isolation``: what its commands run in (see :class:`~harness_lab.sandbox.SandboxPolicy`)."""
        scenario = load_scenario(name)
        root = data_dir()
        run = cls(
            contract=load_contract(root / "contracts" / f"{scenario.contract}.yaml"),
            proposer=proposer if proposer is not None else ScriptedProposer(scenario.actions, then=scenario.then),
            evidence=EvidenceCatalogue.from_dir(root / "evidence"),
            workspace=workspace, validation=validation, approver=approver, clock=clock,
            run_id=run_id or scenario.id, isolation=isolation,
        )
        if scenario.repository is not None:  # a coding task: its repository is the workspace it starts from
            try:
                copy_repository(root / "coding" / scenario.repository, run.workspace)
            except BaseException:
                run.close()
                raise
        run.scenario = scenario_ref(name)  # before the store registers the run: resume rebuilds it from it
        run.checkpoints = cls._log_source().open_log(store, run, fresh=True) if store is not None else None
        return run

    # -- checkpoints: resume, fork --------------------------------------------------------------
    @classmethod
    def resume(
        cls: type[_R],
        store: Any,
        run_id: str,
        *,
        proposer: Proposer | None = None,
        evidence: EvidenceCatalogue | None = None,
        approver: Approver | None = None,
        effects: ExternalEffects | None = None,
        clock: Clock | None = None,
        isolation: Isolation = "auto",
        trigger_checks: Mapping[str, TriggerTest] | None = None,
    ) -> _R:
        """Continue a checkpointed run in the seed's order (see :mod:`harness_lab.persistence.resume`); the
        checks are in ``run.resume_report``; a failed check leaves the run BLOCKED and the store as it was.
        The run keeps the isolation it was started with; ``isolation`` may strengthen it for this process
        ("required" or a named wrapper over "auto"), never weaken it (a ConfigError). ``trigger_checks``:
        the checks ``trigger.still_valid`` may name (see :mod:`harness_lab.loop.triggers`), re-verified first."""
        resumed: _R = cls._log_source().resume(
            cls, store, run_id, proposer=proposer, evidence=evidence, approver=approver, effects=effects,
            clock=clock, isolation=isolation, trigger_checks=trigger_checks)
        return resumed

    def fork(self: _R, checkpoint_id: str | None = None, *, at_step: int | None = None, budget: BudgetChoice = "keep",
             new_run_id: str | None = None, workspace: str | Path | None = None) -> _R:
        """A new run (new id, own workspace) from a checkpoint ``"<run>@<step>"`` or a sandbox snapshot
        id of this run, or from step ``at_step`` of this run (exactly one of the two); the original run,
        its store rows and its workspace are left untouched. From a step, the files come from the store
        (no snapshot needed) and ``budget`` says what the fork starts with spent: ``"keep"`` the spend at
        that step, ``"fresh"`` nothing, a mapping the fields it names (see :mod:`harness_lab.timeline`)."""
        if (checkpoint_id is None) == (at_step is None):
            raise RunStateError("fork: give exactly one of a checkpoint or snapshot id and at_step=")
        forked: _R = self._log_source().fork(self, checkpoint_id, at_step, budget=budget, new_run_id=new_run_id,
                                              workspace=workspace)
        return forked

    # -- time travel (harness_lab.timeline) --------------------------------------------------------
    @property
    def history(self) -> list[StepPoint]:
        """Every committed step as a :class:`~harness_lab.timeline.StepPoint`, step 0 (the run as
        registered) first. Read from the run's store: a run without one has no history to travel in."""
        return self._log_source().history(self)

    def at(self, n: int) -> StepView:
        """Step ``n`` (0 <= n <= step_no), read-only: the context the proposer saw, the proposal, the
        decision, the result in full, the verdict, the budget spent and the workspace files with their
        diff against step n-1 (see :class:`~harness_lab.timeline.StepView`). Read from the run's store: a
        run without one refuses in one line ("give it InMemoryStore() or SQLiteStore(path)")."""
        return self._log_source().at(self, n)

    @classmethod
    def open(cls: type[_R], db: str | Path | Any, run_id: str, *, proposer: Proposer | None = None) -> _R:
        """A stored run reopened read-only, for inspection: ``history``, ``at`` and ``fork`` work; nothing
        is written, no lease taken, no workspace needed; ``step`` and the like refuse in one line
        (``Run.resume`` continues it). Works after kill -9 and resume: every step of every process shows.
        A path is opened read-only (a fork of the run is then not registered in it); a ``Store`` object as
        it is (forks register there). ``proposer``: what its forks propose with (default: the recorded
        script; a run of another proposer needs one before a fork of it steps)."""
        opened: _R = cls._log_source().open(cls, db, run_id, proposer)
        return opened

    def snapshot(self, label: str = "manual") -> SnapshotInfo:
        """Snapshot now: the workspace files and the run's state, for :meth:`rollback` or :meth:`fork`."""
        self.crash.refuse(self.run_id)
        self._refuse_if_read_only()
        return self.sandbox.snapshot(label=label)

    def halt(self, code: str, message: str) -> StepRecord:
        """Stop now, safely, with a reason (one step without a proposal; the run ends BLOCKED)."""
        stop = StopReason(code=code, message=message)  # bad input refused before anything changes
        self._open_step()
        self.waiting, self._pending = None, None
        return self._close(None, Decision(verdict="block", reason=message), stop=stop)

    # -- snapshots ------------------------------------------------------------------------------
    def rollback(self, snapshot_id: str | None = None, *, to_step: int | None = None,
                 budget: BudgetChoice = "keep") -> None:
        """Restore the workspace files *and* the run's state and context to a snapshot, or to step
        ``to_step`` (files from the store: no snapshot needed); exactly one of the two. ``budget``:
        ``"keep"`` keeps the spend as it is for a snapshot and takes the spend at ``to_step`` for a step;
        ``"fresh"`` zeroes it; a mapping sets the fields it names (see :mod:`harness_lab.timeline`)."""
        if (snapshot_id is None) == (to_step is None):
            raise RunStateError("rollback: give exactly one of a snapshot id and to_step=")
        self._refuse_if_read_only()
        if to_step is not None:
            self._log_source().rollback_to(self, to_step, budget=budget)
            return
        assert snapshot_id is not None
        check_budget(budget)  # refused before anything changes
        info = self.sandbox.rollback(snapshot_id)
        if info.run_state is None:
            raise RunStateError(f"snapshot {snapshot_id} holds no run state")
        self.restore(info.run_state, source=f"snapshot {snapshot_id}")
        if budget != "keep":
            self.usage = spend(self.usage, budget)
            self.gates.started_at = self.clock.now() - self.usage.elapsed_s
        # A snapshot's context is not in the store: Run.at shows no context for the next step (this says why).
        self._emit(Note, topic=ROLLED_BACK, message=f"rolled back to snapshot {snapshot_id}",
                   data={"snapshot": snapshot_id})
        # The harness changed the workspace itself: not an external change. The restored tree is the one the
        # next step compares with, so an outside write after the rollback is still seen.
        self._ws_hash = self.sandbox.workspace_hash()

    # -- faults -----------------------------------------------------------------------------------
    def inject(self, fault_or_name: Fault | str, at_step: int | None = None) -> Fault:
        """Arm a fault (catalogue name or :class:`~harness_lab.faults.Fault`) for the next step or
        step ``at_step``; the step it strikes records it, and ``faults`` how the harness answered."""
        fault = resolve_fault(fault_or_name)
        if at_step is not None and (not isinstance(at_step, int) or isinstance(at_step, bool)):
            raise ValueError(f"at_step: a whole step number, got {at_step!r}")
        if self.crashed is not None or self.state.terminal:  # a fault armed now could never fire
            why = self._crash_why() if self.crashed else self.state.value
            raise RunStateError(f"run {self.run_id} is {why}: it takes no more steps, so no fault can strike it")
        step = self.step_no + 1 if at_step is None else at_step
        if step <= self.step_no:
            raise ValueError(f"step {step} is past (the run is at step {self.step_no})")
        self._faults.arm(fault, step)
        return fault

    @property
    def faults(self) -> list[FaultRecord]:
        """Every fault that fired, with its effect and the harness's answer."""
        return self._faults.records

    def _check_external_change(self) -> bool:
        """Between steps only the outside world changes the workspace: what the run saw there is stale.
        True when it changed."""
        now, before = self.sandbox.workspace_hash(), self._ws_hash
        if before is None or now == before:
            self._ws_hash = now
            return False
        stale = [item.id for tool in WORKSPACE_TOOLS for item in self.context.mark_stale(tool)]
        self.context.reselect()
        why = (f"the workspace changed outside the run before step {self.step_no}: {len(stale)} earlier "
               "observation(s) of it are stale and left the view; re-read before relying on them")
        self.context.add_feedback(self.step_no, why, source="external", key="external_change")
        self._emit(Note, topic="external_change", message=why, data={"stale": stale})
        self._ws_hash = now  # only once reported: a Ctrl-C half-way leaves the change for the next look
        return True

    def _discard_pending(self) -> None:
        """The pending proposal was made from a view the outside change made stale: drop it, kept in the trace."""
        assert self._pending is not None
        discarded, self._pending = self._pending.raw, None
        self._emit(Note, topic="pending_discarded",
                   message="the pending proposal was made before the workspace changed outside the run: "
                           "discarded, the proposer is asked again with the updated view",
                   data={"proposal": discarded})

    # -- the five parts of a step ---------------------------------------------------------------
    def _preflight(self) -> StepRecord | None:
        """Open the step, or close it at once: the trigger no longer holds, a human gate timed out, a fault
        before the step, an outside change to the workspace (a pending proposal made before it goes), the
        budget spent. A Ctrl-C here, before anything was decided, undoes the step."""
        if self.waiting is not None and not self.state.terminal and self.human_gate.timed_out() is None:
            raise RunStateError(f"run {self.run_id} waits for a human: call approve() or reject(reason)")
        if self.state is RunState.CREATED and self.crashed is None:  # the run starts only if its trigger holds
            holds, why = trigger_holds(self.contract.trigger, self.trigger_checks, self.workspace)
            if not holds:
                return self.halt(TRIGGER_INVALID, f"the run did not start: its trigger {why}")
        self._open_step()
        if self.waiting is not None and (timeout := self.human_gate.timed_out()) is not None:
            self.waiting, self._pending = None, None
            return self._close(None, Decision(verdict="rejected", reason=timeout.message), stop=timeout)
        try:
            if self._faults.armed:  # the usual step has no fault armed: its hooks are skipped
                self._faults.before_step(self)
            if self._check_external_change() and self._pending is not None:
                self._discard_pending()  # made from the view before the change: ask again below
        except BaseException as exc:
            if not isinstance(exc, Exception):  # Ctrl-C before anything was decided: undo the step
                self._abandon_step()
            raise
        if (stop := self.gates.before_decision(self._used)) is not None:
            return self._close(None, Decision(verdict="exhaust", reason=stop.message), stop=stop)
        return None

    def _propose(self) -> Proposal | StepRecord:
        """What `pending` would give (the gates and the state were checked by _preflight), counted as a
        decision; or the step closed: the proposer raised (a safe stop) or its endpoint failed. A Ctrl-C
        while the model thinks undoes the step."""
        failure, self._failed_ask = self._failed_ask, None
        if (pending := self._pending) is None and failure is None:
            view = self._view()
            try:
                out = self.proposer.propose(view)
            except Exception as exc:  # the policy broke: a recorded step and a safe stop, not a half-open step
                why = f"the proposer raised {type(exc).__name__}: {exc}; no proposal, the run stopped safely"
                return self._close(None, Decision(verdict="block", reason=why),
                                   stop=StopReason(code="proposer_error", message=why))
            except BaseException:  # Ctrl-C while the model thinks: no half-open step left behind
                self._abandon_step()
                raise
            if isinstance(out, EndpointFailure):
                failure = out
            else:
                pending = self._parse_output(view, out)
        if failure is not None:
            return self._endpoint_failed(failure)
        assert pending is not None
        if self._endpoint_failures or self._parked_on_endpoint or self.state is RunState.WAITING_FOR_ENDPOINT:
            self._endpoint_answered()  # (only then: it changes nothing after an answer)
        proposal = self._faults.proposal(self, pending, parse_proposal) if self._faults.armed else pending
        self._pending, self._in_flight, self._gates_at_start = None, pending, self.gates.mark()
        self._used.decisions += 1
        return proposal

    def _ask_proposer(self) -> Proposal | EndpointFailure:
        view = self._view()
        out = self.proposer.propose(view)
        return out if isinstance(out, EndpointFailure) else self._parse_output(view, out)

    def _view(self) -> ContextView:
        """What the proposer sees, with the run's token budget left when it has one (a model's reply
        is capped by it, so one answer cannot overshoot the budget)."""
        view, limit = self.context.view(), self.contract.budget.max_tokens
        return view if limit is None else view.with_tokens_left(max(0, limit - self._used.tokens))

    # -- the proposer's endpoint ----------------------------------------------------------------
    def _endpoint_failed(self, failure: EndpointFailure) -> StepRecord:
        """A step with no proposal: the endpoint failed. Recorded as an endpoint event, never shown to
        the model, charging no decision and no tokens; ``max_endpoint_failures`` in a row (or one that
        asking again cannot heal) park the run WAITING_FOR_ENDPOINT, resumable when it answers."""
        self._endpoint_failures += 1
        count, limit = self._endpoint_failures, self.contract.budget.max_endpoint_failures
        self._emit(Note, topic="endpoint_failure", message=f"the model's endpoint failed: {failure.reason}",
                   data={"status": failure.status, "attempts": failure.attempts, "retryable": failure.retryable,
                         "consecutive": count})
        stop = None
        if self.state is not RunState.WAITING_FOR_ENDPOINT and (count >= limit or not failure.retryable):
            stop = StopReason(code="endpoint_unavailable", message=(
                f"the model's endpoint failed {count} time(s) in a row (last: {failure.reason}); nothing was "
                "charged; the run waits: step or resume it when the endpoint answers"))
        self._parked_on_endpoint = self.state is RunState.WAITING_FOR_ENDPOINT or stop is not None
        return self._close(None, Decision(verdict="unavailable", reason=failure.reason), stop=stop)

    def _endpoint_answered(self) -> None:
        self._endpoint_failures, self._parked_on_endpoint = 0, False
        if self.state is RunState.WAITING_FOR_ENDPOINT:
            self.stop_reason = None
            self._transition(RunState.RUNNING, "the model's endpoint answered again")

    def _parse_output(self, view: ContextView, out: object) -> Proposal:
        raw, tokens = (out.raw, out.tokens) if isinstance(out, ProposerOutput) else (out, None)
        proposal = parse_proposal(raw)
        spent = tokens if tokens is not None else view.total_tokens + self.context.counter(str(proposal.raw))
        self._used.tokens += spent
        return proposal

    def _gate(self, proposal: Proposal) -> tuple[Decision, StopReason | None]:
        action = proposal.action
        if action is None:
            return Decision(verdict="refuse", reason=proposal.error.message if proposal.error else "invalid"), None
        if type(action) not in PLAIN_TOOLS:  # most steps: one set lookup, no pydantic isinstance
            if isinstance(action, ForbiddenAction):
                why = f"{action.requested_kind} would change the contract, validator or run state"
                return Decision(verdict="block", reason=why), StopReason(code="forbidden_action", message=why)
            if isinstance(action, Finish):
                return _VALIDATE, None
        if (stop := self.gates.before_tool_call(self._used)) is not None:
            return Decision(verdict="exhaust", reason=stop.message), stop
        convergence = self.gates.convergence(proposal, self._used.decisions)
        if convergence == "stop":
            why = "same tool with near-identical arguments again after a hint: no progress"
            return Decision(verdict="block", reason=why), StopReason(code="no_progress", message=why)
        if convergence == "hint":
            return Decision(verdict="refuse", reason=self.gates.hint()), None
        if (gated := self.contract.human_gate.required_for) and action.gate_category in gated:
            return self.human_gate.decide(proposal)
        return _EXECUTE, None

    def _execute(self, proposal: Proposal, key: str | None = None) -> ToolResult:
        assert proposal.action is not None
        self._used.tool_calls += 1
        # A Ctrl-C in here is a crash mid-effect (see CrashGuard.interrupted); the tries cost nothing.
        # Before the effect too (a repair snapshot, a workspace hash, the ledger's intent): the step is
        # decided and counted, and the intent may be written, so it is a crash before the effect.
        try:
            if self.repair is not None:
                self.repair.before_execute(self, proposal)
            if proposal.action.kind == "run_command" and not self._isolation_noted:
                self._note_isolation()
            if type(proposal.action) not in READ_ACTIONS and effect_class(proposal.action) != "read":
                # An outside write since the step's first check (while the proposer thought) is reported
                # now: once this tool has run, the end of the step folds the workspace into the run's own.
                self._check_external_change()
            executor = self.executor
            if self._faults.armed:  # a tool fault swaps the executor; a crash fault may strike
                executor = self._faults.executor_for(self, proposal.action, executor)
                self.crash.point(CrashPoint.BEFORE_EFFECT)
            key = key or f"{self.run_id}:{self.step_no}"
            held = self.checkpoints.before_effect(proposal.action, key) if self.checkpoints is not None else None
        except BaseException as exc:
            self.crash.interrupted(exc, CrashPoint.BEFORE_EFFECT, proposal.action.kind)
            raise
        try:
            result = held or executor.execute(proposal.action, idempotency_key=key)
        except BaseException as exc:
            self.crash.interrupted(exc, CrashPoint.AFTER_EFFECT, proposal.action.kind)
            raise
        if self._faults.armed:
            self.crash.point(CrashPoint.AFTER_EFFECT)
        self.trace.add(tool_called, self.step_no, result.tool, result)
        return result

    def _note_isolation(self) -> None:
        """Once per process, before its first command: a trace note when commands run without a namespace."""
        self._isolation_noted = True
        caps = self.sandbox.capabilities
        if caps["isolation"] == "none":
            self._emit(Note, topic="no_isolation",
                       message="commands run without isolation: no network, pid or mount namespace "
                               f"(isolation {self.isolation!r})",
                       data={"isolation": self.isolation, "missing": caps["missing"]})

    def _observe(self, proposal: Proposal, decision: Decision, result: ToolResult | None) -> None:
        """What the step saw goes into the context. A Ctrl-C here: the effect (if any) ran and the step is
        unrecorded, so it is a crash (after the effect if one ran, else before it)."""
        try:
            if proposal.claims:
                self._emit(Note, topic="claims_ignored", message="claims in the proposal are recorded, never trusted",
                           data=proposal.claims)
            if result is not None and result.tool in _SUBTASK_TOOLS and result.status == "ok":
                # The context recorded it itself (the goal in L2, or the conclusion in L3): no interaction too.
                self._emit(Note, topic=result.tool, message=result.content or result.tool, data=result.data)
            elif result is not None:
                text = result.content if result.status == "ok" else str(result.for_model())
                key = state_key(proposal, self.contract) if type(proposal.action) in KEYED else None
                self.context.add_interaction(self.step_no, proposal.describe(), text or "",
                                             source=f"step {self.step_no}:{result.tool}", key=key)
            elif decision.verdict == "refuse":
                hint = f"; {proposal.error.hint}" if proposal.error and proposal.error.hint else ""  # a gate's reason is its hint
                self.context.add_feedback(self.step_no, f"refused: {decision.reason}{hint}", source=f"step {self.step_no}:gate")
            if self.gates.budget.max_tokens is not None and (warning := self.gates.token_warning(self._used)) is not None:
                self.context.add_feedback(self.step_no, warning, source="gates", key="gates:budget")
                self._emit(Note, topic="budget_warning", message=warning)
        except BaseException as exc:
            self.crash.interrupted(exc, CrashPoint.BEFORE_EFFECT if result is None else CrashPoint.AFTER_EFFECT,
                                   _kind(proposal), "observe")
            raise

    # -- the restorable state (its image) and what the run used ------------------------------------
    def capture(self, *, context: bool = True) -> dict[str, Any]:
        """The run's restorable state (for snapshots and checkpoints); JSON-able, no secrets.
        ``context=False`` leaves the context out (a checkpoint writes it as a change log)."""
        return self.image.capture(context=context)

    def capture_compact(self) -> dict[str, Any]:
        """:meth:`capture` without the context, the state, and the entries at their empty value
        (``checkpoint.RUN_STATE_EMPTY``): a checkpoint row's ``run_state``, which
        :class:`~harness_lab.persistence.checkpoint.Checkpoint` fills back in. Built every step with a store."""
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
        return self._used.usage()

    @usage.setter
    def usage(self, value: Usage) -> None:
        self._used = Counters.of(value)

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

    @property
    def crashed(self) -> CrashPoint | None:
        """Where the run crashed (a crash fault, or a Ctrl-C mid-step); None while it has not."""
        return self.crash.crashed

    @crashed.setter
    def crashed(self, point: CrashPoint | None) -> None:
        self.crash.crashed = point

    @property
    def crash_cause(self) -> str | None:
        """Why the run crashed: ``"simulated"`` (the process_crash fault) or ``"interrupted: <type>"``
        (a Ctrl-C mid-step); None while it has not crashed."""
        return self.crash.cause if self.crash.crashed is not None else None

    def _crash_why(self) -> str:
        return self.crash.why()

    # -- bookkeeping ----------------------------------------------------------------------------
    def _refuse_if_read_only(self) -> None:
        if self.read_only is not None:
            raise RunStateError(f"run {self.run_id} was {self.read_only}: resume it to continue")

    def _open_step(self) -> None:
        if self.read_only is not None:  # (the checks, inline: every step opens)
            self._refuse_if_read_only()
        if self.crash.crashed is not None:
            self.crash.refuse(self.run_id)
        if self.state in TERMINAL_STATES:
            raise RunStateError(f"run {self.run_id} is {self.state.value} ({self.stop_reason.code if self.stop_reason else '?'}); it takes no more steps")
        if self.gates.started_at is None:
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
        undone = self.trace.undo_step(self.step_no)
        self.step_no -= 1
        self.state = self._before  # an undo, not a change: its StateChanged event went with the step
        for event in undone:
            if isinstance(event, Note) and event.topic in _KEPT_WHEN_ABANDONED:
                self._emit(Note, topic=event.topic, message=event.message, data=event.data)

    def _close(self, proposal: Proposal | None, decision: Decision, *, result: ToolResult | None = None,
               verdict: Verdict | None = None, stop: StopReason | None = None) -> StepRecord:
        self._in_flight = None  # the step is settled: its proposal is history, not pending
        # A Ctrl-C in here leaves the step decided (and its effect, if any, carried out) but unrecorded,
        # with the state maybe moved on: too much to undo by hand, so it is a crash (CrashGuard.interrupted),
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
            if (result is None or proposal is None or proposal.action is None
                    or type(proposal.action) not in READ_ACTIONS and effect_class(proposal.action) != "read"):
                # Fold in what this step wrote. After a pure tool there is nothing of the run's to fold
                # in: the hash stays as the step found it, so an outside write during the step (while
                # the proposer thought, say) is reported by the next step instead of absorbed here.
                self._ws_hash = self.sandbox.workspace_hash()
            self._used.elapsed_s = self.gates.elapsed()
            events = self.trace.step_events  # the step's own events go into its record
            record = step_record(self.step_no, self._before, self.state, proposal, decision, result, verdict,
                                 self._used.usage(), tuple(events))
            events.clear()
        except BaseException as exc:
            landed = result is not None or decision.verdict == "validate"
            self.crash.interrupted(exc, CrashPoint.AFTER_EFFECT if landed else CrashPoint.BEFORE_EFFECT,
                                   _kind(proposal), "close")
            raise
        try:
            if self._faults.armed:  # the usual step has no fault armed: no crash point to visit
                self.crash.point(CrashPoint.BEFORE_COMMIT)
            if self.checkpoints is not None:
                self.checkpoints.commit(record, self._ws_hash)
                _keep_window(self.records, self.checkpoints.window)
                _keep_window(self.events, 4 * self.checkpoints.window)
        except BaseException as exc:
            self.crash.interrupted(exc, CrashPoint.BEFORE_COMMIT, _kind(proposal), "close")
            raise
        self.records.append(record)
        if self._faults.armed:
            self.crash.point(CrashPoint.AFTER_COMMIT)
        return record

    def _transition(self, after: RunState, reason: str) -> None:
        """The one place the run's state changes; every change is an event."""
        if not can_transition(self.state, after):
            raise RunStateError(f"illegal transition {self.state.value} -> {after.value}")
        before, self.state = self.state, after
        self._emit(StateChanged, before=before, after=after, reason=reason)

    def _emit(self, event_type: Callable[..., Event], **fields: Any) -> None:
        self.trace.emit(event_type, self.step_no, **fields)

    def _note(self, topic: str, message: str, data: dict[str, Any]) -> None:
        self.trace.emit(Note, self.step_no, topic=topic, message=message, data=data)

    @property
    def _seq(self) -> int:
        """The last event's number (resume, fork and a rollback to a step set it)."""
        return self.trace.seq

    @_seq.setter
    def _seq(self, value: int) -> None:
        self.trace.seq = value


def _keep_window(trace: RecordLog[Any], size: int) -> None:
    """Older entries live in the store: at most ``size`` more than the window are held (so never 2x it),
    dropped 16 at a time (amortized O(1)). Not more: a step's records are let go before the collector's
    youngest generation fills, so they die young (held up to 2x a 64-step window, they outlived a
    collection every ~100 steps and a full one every ~3,000: ~12 µs a stored step, measured)."""
    if len(trace) >= size + min(size, 16):
        del trace[: len(trace) - size]


def _kind(proposal: Proposal | None) -> str | None:
    return proposal.action.kind if proposal is not None and proposal.action is not None else None


# Where a stop leaves the run, by the decision that made it; any other stop is BLOCKED.
_STOPPED_IN = {"exhaust": RunState.EXHAUSTED, "unavailable": RunState.WAITING_FOR_ENDPOINT}

# Notes of an abandoned step that record the world, not the step (see _abandon_step).
_KEPT_WHEN_ABANDONED = ("external_change", "pending_discarded")


