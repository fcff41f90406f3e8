"""A single-steppable run: propose -> gate -> execute -> observe -> validate.

The model only proposes; this module decides. ``step()`` is synchronous and returns one
:class:`~harness_lab.records.events.StepRecord`; ``pending`` shows the next proposal before it executes.

``Run`` adds the step loop to :class:`~harness_lab.loop._run_base.RunBase` (its bookkeeping) and owns its
collaborators, no mixins: ``run.image`` (capture / restore), ``run.human_gate`` (approve / reject),
``run.finish_check`` (validation); its public methods for them delegate.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property
from pathlib import Path

from ..checkpoint import Checkpointer
from ..clock import Clock
from ..context import ContextView
from ..contract import load_contract
from ..errors import RunStateError
from ..evidence import EvidenceCatalogue
from ..faults import CrashPoint, Fault, FaultRecord, resolve_fault
from ..paths import data_dir
from ..proposers.base import EndpointFailure, Proposer, ProposerOutput
from ..proposers.scripted import ScriptedProposer
from ..records.actions import Finish, ForbiddenAction
from ..records.effect_classes import effect_class
from ..records.events import (
    Decision,
    Note,
    StepRecord,
    StopReason,
)
from ..records.proposal import Proposal, parse_proposal
from ..records.states import RunState
from ..records.tools import ToolResult
from ..sandbox.policy import Isolation
from ..sandbox.snapshots import SnapshotInfo
from ..scenarios import copy_repository, load_scenario, scenario_ref
from ..store import Store
from ..timeline.breakpoints import Stops, Until
from ..timeline.records import ROLLED_BACK, BudgetChoice, StepPoint, StepView
from ..validation.semantic import SemanticReviewer
from ._edits import edited_proposal
from ._finish_check import FinishCheck
from ._human_gate import HumanGate
from ._run_base import RunBase, _kind
from ._step_records import proposed, tool_called
from ._step_tables import PLAIN_TOOLS, WORKSPACE_TOOLS, state_key
from .approval import Approver
from .executor import ExternalEffects
from .triggers import TRIGGER_INVALID, TriggerTest, trigger_holds

__all__ = ["Run"]

# The two decisions most steps make: frozen records, so one instance each serves every step.
_EXECUTE = Decision(verdict="execute", reason="allowed tool call within budget")
_SUBTASK_TOOLS = frozenset({"begin_subtask", "finish_subtask"})
_VALIDATE = Decision(verdict="validate", reason="finish is a claim: validate the artifact")
_WHOLE: object = object()  # edit_pending given no whole proposal (None is a proposal: a malformed one)


class Run(RunBase):
    """A single-steppable run. ``step()`` reads as propose -> gate -> execute -> observe -> validate."""

    _paused_before: Proposal | None = None  # the pending call a tool breakpoint last stopped run() before

    # -- its collaborators (made on first use: Run has no constructor of its own) --------------
    @cached_property
    def human_gate(self) -> HumanGate:
        """The human gate: asks the approver, parks the run, and approve / reject of what waits."""
        return HumanGate(self, execute=self._execute, observe=self._observe,
                         check_external_change=self._check_external_change)

    @cached_property
    def finish_check(self) -> FinishCheck:
        """Validation, the finish step's effect: the contract's layers, the receipt, a repair's answer."""
        return FinishCheck(self, self.rollback)

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
        if self.crashed is not None:
            raise RunStateError(f"run {self.run_id} {self._crash_why()}; resume from a checkpoint")
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
        # what `pending` would give: the gates and the state were checked just above
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
        self._endpoint_answered()
        proposal = self._faults.proposal(self, pending, parse_proposal) if self._faults.armed else pending
        self._pending, self._in_flight, self._gates_at_start = None, pending, self.gates.mark()
        self._used.decisions += 1
        decision, stop = self._gate(proposal)
        self._append(proposed(self._next_seq(), self.step_no, proposal, decision))
        result = self._execute(proposal) if decision.verdict == "execute" else None
        try:
            self._observe(proposal, decision, result)
        except BaseException as exc:  # Ctrl-C: the effect (if any) ran, the step is unrecorded: a crash
            self._crash_on_interrupt(exc, CrashPoint.BEFORE_EFFECT if result is None else CrashPoint.AFTER_EFFECT,
                                     _kind(proposal), "observe")
            raise
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
        cls,
        name: str,
        *,
        validation: bool = True,
        workspace: str | Path | None = None,
        approver: Approver | None = None,
        clock: Clock | None = None,
        run_id: str | None = None,
        store: Store | None = None,
        proposer: Proposer | None = None,
        isolation: Isolation = "auto",
    ) -> Run:
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
        run.checkpoints = Checkpointer(store, run, fresh=True) if store is not None else None
        return run

    # -- checkpoints: resume, fork --------------------------------------------------------------
    @classmethod
    def resume(
        cls,
        store: Store,
        run_id: str,
        *,
        proposer: Proposer | None = None,
        evidence: EvidenceCatalogue | None = None,
        approver: Approver | None = None,
        effects: ExternalEffects | None = None,
        clock: Clock | None = None,
        isolation: Isolation = "auto",
        trigger_checks: Mapping[str, TriggerTest] | None = None,
    ) -> Run:
        """Continue a checkpointed run in the seed's order (see :mod:`harness_lab.persistence.resume`); the
        checks are in ``run.resume_report``; a failed check leaves the run BLOCKED and the store as it was.
        The run keeps the isolation it was started with; ``isolation`` may strengthen it for this process
        ("required" or a named wrapper over "auto"), never weaken it (a ConfigError). ``trigger_checks``:
        the checks ``trigger.still_valid`` may name (see :mod:`harness_lab.loop.triggers`), re-verified first."""
        from ..persistence.resume import resume_run

        return resume_run(cls, store, run_id, proposer=proposer, evidence=evidence, approver=approver,
                          effects=effects, clock=clock, isolation=isolation, trigger_checks=trigger_checks)

    def fork(self, checkpoint_id: str | None = None, *, at_step: int | None = None, budget: BudgetChoice = "keep",
             new_run_id: str | None = None, workspace: str | Path | None = None) -> Run:
        """A new run (new id, own workspace) from a checkpoint ``"<run>@<step>"`` or a sandbox snapshot
        id of this run, or from step ``at_step`` of this run (exactly one of the two); the original run,
        its store rows and its workspace are left untouched. From a step, the files come from the store
        (no snapshot needed) and ``budget`` says what the fork starts with spent: ``"keep"`` the spend at
        that step, ``"fresh"`` nothing, a mapping the fields it names (see :mod:`harness_lab.timeline`)."""
        if (checkpoint_id is None) == (at_step is None):
            raise RunStateError("fork: give exactly one of a checkpoint or snapshot id and at_step=")
        if at_step is not None:
            from ..timeline.branch import fork_at

            return fork_at(self, at_step, budget=budget, new_run_id=new_run_id, workspace=workspace)
        from ..persistence.fork import fork_run

        assert checkpoint_id is not None
        return fork_run(self, checkpoint_id, new_run_id=new_run_id, workspace=workspace, budget=budget)

    # -- time travel (harness_lab.timeline) --------------------------------------------------------
    @property
    def history(self) -> list[StepPoint]:
        """Every committed step as a :class:`~harness_lab.timeline.StepPoint`, step 0 (the run as
        registered) first. Read from the run's store: a run without one has no history to travel in."""
        from ..timeline.travel import history

        return history(self)

    def at(self, n: int) -> StepView:
        """Step ``n`` (0 <= n <= step_no), read-only: the context the proposer saw, the proposal, the
        decision, the result in full, the verdict, the budget spent and the workspace files with their
        diff against step n-1 (see :class:`~harness_lab.timeline.StepView`). Read from the run's store: a
        run without one refuses in one line ("give it InMemoryStore() or SQLiteStore(path)")."""
        from ..timeline.travel import step_view

        return step_view(self, n)

    @classmethod
    def open(cls, db: str | Path | Store, run_id: str, *, proposer: Proposer | None = None) -> Run:
        """A stored run reopened read-only, for inspection: ``history``, ``at`` and ``fork`` work; nothing
        is written, no lease taken, no workspace needed; ``step`` and the like refuse in one line
        (``Run.resume`` continues it). Works after kill -9 and resume: every step of every process shows.
        A path is opened read-only (a fork of the run is then not registered in it); a ``Store`` object as
        it is (forks register there). ``proposer``: what its forks propose with (default: the recorded
        script; a run of another proposer needs one before a fork of it steps)."""
        from ..timeline.travel import open_run

        return open_run(cls, db, run_id, proposer)

    def snapshot(self, label: str = "manual") -> SnapshotInfo:
        """Snapshot now: the workspace files and the run's state, for :meth:`rollback` or :meth:`fork`."""
        if self.crashed is not None:
            raise RunStateError(f"run {self.run_id} {self._crash_why()}; resume from a checkpoint")
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
        from ..timeline.branch import rollback_to
        from ..timeline.budget import check_budget, spend

        self._refuse_if_read_only()
        if to_step is not None:
            rollback_to(self, to_step, budget=budget)
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
        if action.gate_category in self.contract.human_gate.required_for:
            return self.human_gate.decide(proposal)
        return _EXECUTE, None

    def _execute(self, proposal: Proposal, key: str | None = None) -> ToolResult:
        assert proposal.action is not None
        self._used.tool_calls += 1
        # A Ctrl-C in here is a crash mid-effect (see _crash_on_interrupt); the tries cost nothing.
        # Before the effect too (a repair snapshot, a workspace hash, the ledger's intent): the step is
        # decided and counted, and the intent may be written, so it is a crash before the effect.
        try:
            if self.repair is not None:
                self.repair.before_execute(self, proposal)
            if proposal.action.kind == "run_command" and not self._isolation_noted:
                self._note_isolation()
            if effect_class(proposal.action) != "read":
                # An outside write since the step's first check (while the proposer thought) is reported
                # now: once this tool has run, the end of the step folds the workspace into the run's own.
                self._check_external_change()
            executor = self.executor
            if self._faults.armed:  # a tool fault swaps the executor; a crash fault may strike
                executor = self._faults.executor_for(self, proposal.action, executor)
                self._crash_point(CrashPoint.BEFORE_EFFECT)
            key = key or f"{self.run_id}:{self.step_no}"
            held = self.checkpoints.before_effect(proposal.action, key) if self.checkpoints is not None else None
        except BaseException as exc:
            self._crash_on_interrupt(exc, CrashPoint.BEFORE_EFFECT, proposal.action.kind)
            raise
        try:
            result = held or executor.execute(proposal.action, idempotency_key=key)
        except BaseException as exc:
            self._crash_on_interrupt(exc, CrashPoint.AFTER_EFFECT, proposal.action.kind)
            raise
        if self._faults.armed:
            self._crash_point(CrashPoint.AFTER_EFFECT)
        self._append(tool_called(self._next_seq(), self.step_no, result.tool, result))
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
        if proposal.claims:
            self._emit(Note, topic="claims_ignored", message="claims in the proposal are recorded, never trusted",
                       data=proposal.claims)
        if result is not None and result.tool in _SUBTASK_TOOLS and result.ok:
            # The context recorded it itself (the goal in L2, or the conclusion in L3): no interaction too.
            self._emit(Note, topic=result.tool, message=result.content or result.tool, data=result.data)
        elif result is not None:
            text = result.content if result.ok else str(result.for_model())
            self.context.add_interaction(self.step_no, proposal.describe(), text or "",
                                         source=f"step {self.step_no}:{result.tool}", key=state_key(proposal, self.contract))
        elif decision.verdict == "refuse":
            hint = f"; {proposal.error.hint}" if proposal.error and proposal.error.hint else ""  # a gate's reason is its hint
            self.context.add_feedback(self.step_no, f"refused: {decision.reason}{hint}", source=f"step {self.step_no}:gate")
        if (warning := self.gates.token_warning(self._used)) is not None:
            self.context.add_feedback(self.step_no, warning, source="gates", key="gates:budget")
            self._emit(Note, topic="budget_warning", message=warning)
