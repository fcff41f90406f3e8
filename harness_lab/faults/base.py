"""What a fault is, where it can strike, and the per-run schedule that arms and logs faults.

A :class:`Fault` is a frozen, documented record. It acts at one *hook* of a step:

==================  ==========================================================================
``before_step``     the world changes before the proposer is asked (a file edited by someone
                    else, a budget squeezed, a faulty summarizer)
``proposal``        the proposal the runtime is about to judge is replaced (the model misbehaves)
``tool``            the next tool call's implementation misbehaves (raises, hangs, returns "")
``after_validate``  the artifact changes after the validator read it, before acceptance
``crash``           the process dies at a :class:`CrashPoint` (raises :class:`SimulatedCrash`)
==================  ==========================================================================

A fault armed for a step fires at its hook the first time that hook is reached at or after the
step (a tool fault waits for the next tool call); ``steps`` > 1 keeps it firing for that many
consecutive steps. Faults that replace something (``proposal``, ``tool``, ``crash``) take turns:
when two are due at one hook, the one armed first fires and the other waits for the hook's next
turn, so every firing acts. Every firing is a ``fault`` note in the trace and, when the step closes, a
:class:`FaultRecord` in ``run.faults`` saying how the harness answered.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, ClassVar, Literal, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from ..context import ContextManager
from ..contract import Budget, ControlContract
from ..errors import SimulatedCrash
from ..records.actions import ActionBase
from ..records.events import Decision, Event, StepRecord, Usage
from ..records.proposal import Proposal
from ..records.states import RunState
from ..records.tools import ToolResult

__all__ = ["CrashPoint", "Fault", "FaultGates", "FaultHook", "FaultRecord", "FaultSchedule", "FaultTarget",
           "FaultableExecutor", "ToolImpl"]

FaultHook = Literal["before_step", "proposal", "tool", "after_validate", "crash"]
ToolImpl = Callable[[ActionBase], ToolResult]


class CrashPoint(str, Enum):
    """Where inside a step the ``process_crash`` fault kills the run (public: resume tests use it).

    * ``BEFORE_EFFECT``  the decision is made, nothing is carried out yet (no tool call, no validation)
    * ``AFTER_EFFECT``   the tool call / validation has been carried out (a side effect may have been
      applied) but the step's result is not yet observed or recorded
    * ``BEFORE_COMMIT``  the step record is complete but not yet appended to ``run.records``
    * ``AFTER_COMMIT``   the step record has been appended (the step is committed)

    A resumed run must reach the state an uninterrupted run reaches, applying no effect twice.
    """

    BEFORE_EFFECT = "before_effect"
    AFTER_EFFECT = "after_effect"
    BEFORE_COMMIT = "before_commit"
    AFTER_COMMIT = "after_commit"


class FaultGates(Protocol):
    """What faults touch of a run's gates (:class:`~harness_lab.loop.gates.LoopGates` is one): the budget a
    squeeze cuts, and the wall clock a simulated hang is charged to."""

    budget: Budget

    def charge(self, seconds: float) -> None: ...


E = TypeVar("E", bound="FaultableExecutor")


class FaultableExecutor(Protocol):
    """What a tool fault needs of a run's executor (:class:`~harness_lab.loop.executor.ToolExecutor` is one):
    a copy whose calls run another implementation behind the executor's own safety net."""

    def with_tool(self: E, impl: ToolImpl) -> E: ...


class FaultTarget(Protocol):
    """The parts of a run a fault may touch (a :class:`~harness_lab.loop.run.Run` is one)."""

    workspace: Path
    contract: ControlContract
    context: ContextManager
    usage: Usage
    step_no: int
    state: RunState

    @property
    def gates(self) -> FaultGates: ...

    # Read-only here (a run's are lists, or harness_lab.loop.record_log.RecordLog: old entries packed).
    @property
    def records(self) -> Sequence[StepRecord]: ...

    @property
    def events(self) -> Sequence[Event]: ...


class Fault(BaseModel):
    """Base of every catalogue entry; the first docstring line is its one-line documentation."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["fault"] = "fault"
    name: str
    steps: int = Field(default=1, ge=1)
    hook: ClassVar[FaultHook] = "before_step"

    @classmethod
    def doc(cls) -> str:
        return (cls.__doc__ or cls.__name__).strip().splitlines()[0]

    # Hooks: each returns a short description of what the fault did (for the trace).
    def before_step(self, run: FaultTarget) -> str:
        return "nothing"

    def replace_proposal(self, run: FaultTarget, proposal: Proposal) -> tuple[object, str]:
        return proposal.raw, "nothing"

    def applies_to(self, action: ActionBase) -> bool:
        """Tool faults: whether this tool call is the one to break (others pass untouched)."""
        return action.is_tool_call

    def tool(self, action: ActionBase) -> ToolImpl:
        raise NotImplementedError

    def hang_seconds(self) -> float:
        """Tool faults: seconds the broken call takes (a hang), charged to the run's wall clock."""
        return 0.0

    def after_validate(self, run: FaultTarget) -> str:
        return "nothing"

    def crash_point(self) -> CrashPoint | None:
        return None

    def answer(self, run: FaultTarget) -> str:
        """Fault-specific facts about the harness's answer, read from the harness's own outputs."""
        return ""


class FaultRecord(BaseModel):
    """One firing of a fault and how the harness answered it (``run.faults``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["fault_record"] = "fault_record"
    fault: str
    step: int
    hook: FaultHook
    effect: str
    answer: str
    state_after: RunState | None
    success_state: bool = False


@dataclass
class _Armed:
    fault: Fault
    at_step: int
    left: int
    fired_steps: set[int] = field(default_factory=set)


def _hanging(impl: ToolImpl, gates: FaultGates, seconds: float) -> ToolImpl:
    def call(action: ActionBase) -> ToolResult:
        gates.charge(seconds)
        return impl(action)

    return call


Emit = Callable[[str, str, dict[str, Any]], None]

_COMMIT_POINTS = (CrashPoint.BEFORE_COMMIT, CrashPoint.AFTER_COMMIT)

# Hooks where a fault replaces something (the proposal, the tool's implementation, the process's
# life): two at once would leave one without effect, so they take turns in the order armed.
_ONE_AT_A_TIME: frozenset[FaultHook] = frozenset({"proposal", "tool", "crash"})

# Hooks that not every step reaches: an unfired note says what the fault was waiting for.
_WAITS_FOR: dict[FaultHook, str] = {
    "after_validate": "it waits for a finish that passes validation, or any finish with validation off",
}


class FaultSchedule:
    """Armed faults of one run, their firings this step, and the log (``records``)."""

    def __init__(self, emit: Emit) -> None:
        self._emit = emit
        self.armed: list[_Armed] = []
        self.records: list[FaultRecord] = []
        self.fired: list[tuple[Fault, FaultHook, str]] = []  # this step's firings, until settle()

    def arm(self, fault: Fault, at_step: int) -> None:
        self.armed.append(_Armed(fault, at_step, fault.steps))
        self._emit("fault_armed", f"fault {fault.name} armed for step {at_step}",
                   {"fault": fault.name, "at_step": at_step, "params": fault.model_dump(mode="json")})

    def _take(self, step: int, hook: FaultHook, match: Callable[[Fault], bool] = lambda f: True) -> list[Fault]:
        if not self.armed:  # the usual step: nothing armed (hooks run ~8 times a step)
            return []
        due: list[Fault] = []
        for armed in list(self.armed):
            if armed.fault.hook != hook or step < armed.at_step or step in armed.fired_steps:
                continue
            if not match(armed.fault):
                continue
            armed.fired_steps.add(step)
            armed.left -= 1
            armed.at_step = step + 1  # a multi-step fault strikes the following steps in a row
            if armed.left <= 0:
                self.armed.remove(armed)
            due.append(armed.fault)
            if hook in _ONE_AT_A_TIME:  # the rest would be marked fired but never act: they wait
                break
        return due

    def _fired_note(self, fault: Fault, hook: FaultHook, effect: str) -> None:
        self.fired.append((fault, hook, effect))
        self._emit("fault", f"fault {fault.name} injected ({hook}): {effect}", {"fault": fault.name, "hook": hook})

    # -- hooks called by the run --------------------------------------------------------------
    def before_step(self, run: FaultTarget) -> None:
        for fault in self._take(run.step_no, "before_step"):
            self._fired_note(fault, "before_step", fault.before_step(run))

    def proposal(self, run: FaultTarget, proposal: Proposal, parse: Callable[[object], Proposal]) -> Proposal:
        for fault in self._take(run.step_no, "proposal"):
            raw, effect = fault.replace_proposal(run, proposal)
            proposal = parse(raw)
            self._fired_note(fault, "proposal", effect)
        return proposal

    def executor_for(self, run: FaultTarget, action: ActionBase, executor: E) -> E:
        if not self.armed:  # the usual step: no closure to make
            return executor
        due = self._take(run.step_no, "tool", lambda f: f.applies_to(action))
        if not due:
            return executor
        fault = due[0]
        impl, hang = fault.tool(action), fault.hang_seconds()
        effect = f"{action.kind} will misbehave: {fault.doc()}"
        if hang > 0:  # the simulated hang costs no real time: the wall clock is charged when the call is made
            impl, effect = _hanging(impl, run.gates, hang), f"{effect} ({hang:g}s charged to the wall clock)"
        self._fired_note(fault, "tool", effect)
        # The executor's own safety net (exceptions -> structured errors, empty reads -> errors) still
        # answers the fault; the copy shares `observed`.
        return executor.with_tool(impl)

    def after_validate(self, run: FaultTarget) -> None:
        for fault in self._take(run.step_no, "after_validate"):
            self._fired_note(fault, "after_validate", fault.after_validate(run))

    def crash(self, run: FaultTarget, point: CrashPoint) -> SimulatedCrash | None:
        """The crash to raise at ``point`` of this step, if a ``process_crash`` fault is due there."""
        due = self._take(run.step_no, "crash", lambda f: f.crash_point() is point)
        if not due:
            return None
        fault = due[0]
        effect = f"the process dies at {point.value} of step {run.step_no}"
        self._fired_note(fault, "crash", effect)
        self._log(fault, "crash", effect, run.step_no, None,
                  "SimulatedCrash raised; this run object refuses further steps: resume from a checkpoint")
        self.abandon(f"the run crashed at {point.value} of step {run.step_no}")
        return SimulatedCrash(point.value, run.step_no)

    def abandon(self, why: str) -> None:
        """The run object is dead (a crash): every fault still armed will never strike it (a resumed
        run has its own schedule); the trace says so."""
        for armed in self.armed:
            self._unfired(armed, why)
        self.armed = []

    def settle(self, run: FaultTarget, decision: Decision, result: ToolResult | None) -> None:
        """At the close of a step: record how the harness answered each fault that fired in it."""
        if not self.fired:
            return
        for fault, hook, effect in self.fired:
            if hook == "crash":
                continue
            parts = [f"decision {decision.verdict}: {decision.reason}"]
            if result is not None:
                parts.append(f"tool {result.status}" + (f": {result.reason}" if result.reason else ""))
            if extra := fault.answer(run):
                parts.append(extra)
            parts.append(f"run {run.state.value}")
            answer = "; ".join(parts)
            self._emit("fault_answer", f"harness answered {fault.name}: {answer}", {"fault": fault.name})
            self._log(fault, hook, effect, run.step_no, run.state, answer)
        self.fired = []

    def expire(self, step: int, state: RunState) -> None:
        """The run ended: a fault still armed will never strike; the trace says so. (A crash due at
        this step's commit points is left: the step's close reaches them next.)"""
        left = [a for a in self.armed if a.at_step <= step and a.fault.crash_point() in _COMMIT_POINTS]
        for armed in self.armed:
            if armed not in left:
                self._unfired(armed, f"the run ended {state.value} at step {step}")
        self.armed = left

    def _unfired(self, armed: _Armed, why: str) -> None:
        # A multi-step fault may have struck already: say so, and how many of its firings never came.
        fired, name, hook = sorted(armed.fired_steps), armed.fault.name, armed.fault.hook
        what = (f"fault {name} fired at step(s) {', '.join(map(str, fired))}; its {armed.left} remaining firing(s) "
                "never came" if fired else f"fault {name} never fired")
        waits = f" ({_WAITS_FOR[hook]})" if hook in _WAITS_FOR else ""
        self._emit("fault_unfired", f"{what}: {why} before its {hook} hook was reached{waits}",
                   {"fault": name, "at_step": armed.at_step, "hook": hook, "fired_steps": fired, "left": armed.left})

    def _log(self, fault: Fault, hook: FaultHook, effect: str, step: int, state: RunState | None, answer: str) -> None:
        self.records.append(FaultRecord(
            fault=fault.name, step=step, hook=hook, effect=effect, answer=answer, state_after=state,
            success_state=state is RunState.REVIEW_READY,
        ))
