"""The external loop (seed 000): state outside the model call, one next state per round.

Loop states are ``ready, running, waiting_for_human, blocked, completed``
(:class:`~harness_lab.records.states.LoopState`, moves checked against ``LOOP_TRANSITIONS``). A *round*
drives the run from ``ready`` until something the loop must decide about happens, classifies that
as one :class:`RoundOutcome`, and moves to the one next state seed 000's table gives:

===================================  ===================  ==============================================
round outcome                        next state           what the loop does
===================================  ===================  ==============================================
goal verified (run REVIEW_READY)     completed            keep the final evidence (receipt), stop
recoverable failure, budget left     ready                record the root cause, narrow the next step
human gate needed                    waiting_for_human    the run has checkpointed; nothing has run
unrecoverable or stop condition      blocked              report the evidence and the decision needed
external change made context stale   ready                discard stale items, reselect the context
===================================  ===================  ==============================================

The stop condition is the contract's ``stop.failure`` rule (:mod:`harness_lab.loop.stop_rules`, the one the
Run and the repair policy read): the *same root cause failing twice in a row* (over rounds) blocks, as
does a recoverable failure with no rounds left. Priority when a round shows several things: the run's own
terminal state, then the gate, then staleness, then the failure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import Enum
from types import MappingProxyType
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict

from ..errors import RunStateError
from ..records.events import StepRecord
from ..records.states import LOOP_TRANSITIONS, LoopState, RunState
from ..validation import Receipt
from .stop_rules import SAME_ROOT_CAUSE, SameRootCause, root_cause

if TYPE_CHECKING:
    from .run import Run

__all__ = [
    "SEED_000_TABLE",
    "BlockedReport",
    "ExternalLoop",
    "RoundFacts",
    "RoundOutcome",
    "RoundRecord",
    "classify",
    "next_state",
]


class RoundOutcome(str, Enum):
    GOAL_VERIFIED = "goal_verified"
    RECOVERABLE_FAILURE = "recoverable_failure"
    HUMAN_GATE = "human_gate"
    UNRECOVERABLE = "unrecoverable"
    CONTEXT_STALE = "context_stale"


SEED_000_TABLE: Mapping[RoundOutcome, tuple[LoopState, str]] = MappingProxyType({
    RoundOutcome.GOAL_VERIFIED: (LoopState.COMPLETED, "write the final evidence, stop scheduling"),
    RoundOutcome.RECOVERABLE_FAILURE: (LoopState.READY, "record the root cause, narrow the next step, "
                                       "never repeat an action with unchanged input and expectation"),
    RoundOutcome.HUMAN_GATE: (LoopState.WAITING_FOR_HUMAN, "checkpoint first, never act then ask"),
    RoundOutcome.UNRECOVERABLE: (LoopState.BLOCKED, "report the blocking evidence and the decision needed"),
    RoundOutcome.CONTEXT_STALE: (LoopState.READY, "discard stale conclusions, reselect the context"),
})


def next_state(outcome: RoundOutcome) -> LoopState:
    """The one next state seed 000's table gives for a round outcome."""
    return SEED_000_TABLE[outcome][0]


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class RoundFacts(_Record):
    """What a round observed, before the loop decides."""

    kind: Literal["round_facts"] = "round_facts"
    run_state: RunState
    root_cause: str | None = None  # a failed check or tool failure the round ended on
    stale: bool = False


def classify(facts: RoundFacts, *, previous_root_cause: str | None = None, rounds_left: int,
             streak: Sequence[str] | None = None, rule: SameRootCause | None = None) -> tuple[RoundOutcome, str]:
    """Exactly one outcome per round, and why. ``streak``: the root causes of the failed rounds right
    before this one, oldest first (default: ``previous_root_cause`` alone); ``rule``: the contract's
    stop.failure rule (default: the same root cause twice)."""
    if facts.run_state is RunState.REVIEW_READY:
        return RoundOutcome.GOAL_VERIFIED, "the run's checks passed"
    if facts.run_state in (RunState.BLOCKED, RunState.EXHAUSTED):
        return RoundOutcome.UNRECOVERABLE, f"the run stopped {facts.run_state.value}"
    if facts.run_state is RunState.WAITING_FOR_HUMAN:
        return RoundOutcome.HUMAN_GATE, "a gated action waits for a human"
    if facts.stale:
        return RoundOutcome.CONTEXT_STALE, "external state changed: the context is stale"
    cause = facts.root_cause or "no verification within the round"
    rule = rule or SameRootCause()
    earlier = list(streak) if streak is not None else [previous_root_cause] if previous_root_cause is not None else []
    if rule.fires([*earlier, cause]):
        return RoundOutcome.UNRECOVERABLE, f"{rule.describe()}: {cause}"
    if rounds_left <= 0:
        return RoundOutcome.UNRECOVERABLE, f"loop budget spent; last failure: {cause}"
    return RoundOutcome.RECOVERABLE_FAILURE, f"recoverable failure: {cause}"


class BlockedReport(_Record):
    """Why the loop stopped short: the evidence and the decision a person must make."""

    kind: Literal["blocked_report"] = "blocked_report"
    reason: str
    evidence: tuple[str, ...]
    root_causes: tuple[str, ...]
    decision_needed: str


class RoundRecord(_Record):
    kind: Literal["round"] = "round"
    round: int
    state_before: LoopState
    state_after: LoopState
    outcome: RoundOutcome
    why: str
    handling: str
    root_cause: str | None = None
    steps: tuple[int, ...] = ()


def _root_cause(record: StepRecord) -> str | None:
    return root_cause(record.verdict) if record.verdict is not None else None


class ExternalLoop:
    """Drives one run in rounds; ``state`` is the loop state, ``rounds`` the record of each round."""

    def __init__(self, run: Run, *, max_rounds: int = 5, steps_per_round: int = 20) -> None:
        for name, value in (("max_rounds", max_rounds), ("steps_per_round", steps_per_round)):
            if type(value) is not int or value < 1:
                raise ValueError(f"{name}: must be >= 1, got {value!r}")
        self.run = run
        self.max_rounds = max_rounds
        self.steps_per_round = steps_per_round
        self.state = LoopState.READY
        self.rounds: list[RoundRecord] = []
        self.root_causes: list[str] = []
        self.final_evidence: Receipt | None = None
        self.report: BlockedReport | None = None
        self._stale_keys: list[str] = []

    # -- driving --------------------------------------------------------------------------------
    def round(self) -> RoundRecord:
        """One round from ``ready``: run until something needs deciding, then one next state."""
        self._require(LoopState.READY)
        before = self._move(LoopState.RUNNING)
        try:
            return self._round(before)
        except BaseException:
            self._abandon_round()
            raise

    def run_until_settled(self) -> LoopState:
        """Rounds until completed, blocked or waiting for a human."""
        while self.state is LoopState.READY:
            self.round()
        return self.state

    def external_change(self, *keys: str) -> None:
        """The outside world changed what the context items named by ``keys`` (key or source) describe."""
        for key in keys:  # refused now, not at the next round (where it would fail every round)
            if not isinstance(key, str) or not key.strip():
                raise ValueError(f"external_change: a context item's key or source (a non-empty string), got {key!r}")
        self._stale_keys.extend(keys)

    def approve(self, *, by: str = "human") -> RoundRecord:
        """Approve the parked action; the round continues from it."""
        self._require(LoopState.WAITING_FOR_HUMAN)
        before = self._move(LoopState.RUNNING)
        try:
            return self._round(before, self.run.approve(by=by))
        except BaseException:
            self._abandon_round()
            raise

    def reject(self, reason: str, *, by: str = "human") -> RoundRecord:
        self._require(LoopState.WAITING_FOR_HUMAN)
        record = self.run.reject(reason, by=by)
        return self._finish(LoopState.WAITING_FOR_HUMAN, RoundFacts(run_state=self.run.state), (record.step,))

    def poll(self) -> RoundRecord | None:
        """While waiting: if the human gate timed out, the run stops safely and so does the loop."""
        self._require(LoopState.WAITING_FOR_HUMAN)
        if not self.run.gate_expired:
            return None
        record = self.run.step()
        return self._finish(LoopState.WAITING_FOR_HUMAN, RoundFacts(run_state=self.run.state), (record.step,))

    # -- internals ------------------------------------------------------------------------------
    def _abandon_round(self) -> None:
        """A round that raised (Ctrl-C, bad input, a crashed run) decided nothing: the loop must not stay
        ``running`` forever, but go back to where the caller can go on, waiting if the run still waits."""
        if self.state is LoopState.RUNNING:
            self._move(LoopState.WAITING_FOR_HUMAN if self.run.waiting is not None else LoopState.READY)

    def _round(self, before: LoopState, first: StepRecord | None = None) -> RoundRecord:
        steps: list[int] = []
        if self._stale_keys and first is None:
            for key in self._stale_keys:
                self.run.context.mark_stale(key)
            self.run.context.reselect()
            self._stale_keys = []
            return self._finish(before, RoundFacts(run_state=self.run.state, stale=True), ())
        if first is None and (self.run.state.terminal or self.run.waiting is not None):
            # A run that arrives settled (resumed from a store, say): the round only classifies it.
            return self._finish(before, RoundFacts(run_state=self.run.state), ())
        record = first
        while True:
            if record is not None:
                steps.append(record.step)
                if (facts := self._facts(record, len(steps))) is not None:
                    return self._finish(before, facts, tuple(steps))
            record = self.run.step()

    def _facts(self, record: StepRecord, taken: int) -> RoundFacts | None:
        run = self.run
        if run.state.terminal or run.waiting is not None:
            return RoundFacts(run_state=run.state)
        if run.state is RunState.WAITING_FOR_ENDPOINT:  # the model's server, not the task: a later round asks again
            return RoundFacts(run_state=run.state, root_cause="endpoint_unavailable: the model's endpoint failed")
        stale = any(e.kind == "note" and e.topic == "external_change" for e in record.events)
        if (cause := _root_cause(record)) is not None or stale:
            return RoundFacts(run_state=run.state, root_cause=cause, stale=stale)
        if taken >= self.steps_per_round:
            return RoundFacts(run_state=run.state, root_cause=f"no verification within {taken} steps")
        return None

    def _finish(self, before: LoopState, facts: RoundFacts, steps: tuple[int, ...]) -> RoundRecord:
        rounds_left = self.max_rounds - len(self.rounds) - 1
        outcome, why = classify(facts, streak=self._streak(), rounds_left=rounds_left,
                                rule=self.run.contract.stop.rules[1])
        after, handling = SEED_000_TABLE[outcome]
        cause = facts.root_cause if facts.root_cause else None
        if outcome in (RoundOutcome.RECOVERABLE_FAILURE, RoundOutcome.UNRECOVERABLE) and not facts.stale:
            cause = cause or (self.run.stop_reason.code if self.run.stop_reason else None)
            if cause:
                self.root_causes.append(cause)
        if outcome is RoundOutcome.RECOVERABLE_FAILURE:
            self.run.context.add_feedback(
                self.run.step_no, f"round {len(self.rounds) + 1} failed, root cause: {cause}. Narrow the next "
                "step to this cause; do not repeat an action with unchanged input and expectation.",
                source="external-loop", key="loop:root_cause")
        elif outcome is RoundOutcome.GOAL_VERIFIED:
            self.final_evidence = self.run.receipt
        elif outcome is RoundOutcome.UNRECOVERABLE:
            self.report = self._blocked_report(why)
        self._move(after)
        record = RoundRecord(round=len(self.rounds) + 1, state_before=before, state_after=after, outcome=outcome,
                             why=why, handling=handling, root_cause=cause, steps=steps)
        self.rounds.append(record)
        return record

    def _streak(self) -> list[str]:
        """The root causes of the recoverable failures that ended the rounds right before this one."""
        causes: list[str] = []
        for record in reversed(self.rounds):
            if record.outcome is not RoundOutcome.RECOVERABLE_FAILURE or record.root_cause is None:
                break
            causes.append(record.root_cause)
        return causes[::-1]

    def _blocked_report(self, why: str) -> BlockedReport:
        run = self.run
        evidence = [r.summary() for r in run.records[-3:]]
        if run.stop_reason is not None:
            evidence.append(f"run stop reason {run.stop_reason.code}: {run.stop_reason.message}")
        code = run.stop_reason.code if run.stop_reason else ""
        if why.startswith("same root cause") or code == SAME_ROOT_CAUSE:
            decision = "change the approach, the goal or the acceptance criteria: retrying cannot fix this cause"
        elif code in ("decision_budget", "tool_budget", "token_budget", "wall_clock") or why.startswith("loop budget"):
            decision = "raise the budget or narrow the goal"
        elif code in ("human_rejected", "human_timeout"):
            decision = "the gated action was refused or not answered: choose another way or change the goal"
        else:
            decision = f"decide how to proceed after: {run.stop_reason.message if run.stop_reason else why}"
        return BlockedReport(reason=why, evidence=tuple(evidence), root_causes=tuple(self.root_causes),
                             decision_needed=decision)

    def _move(self, after: LoopState) -> LoopState:
        if after not in LOOP_TRANSITIONS[self.state]:
            raise RunStateError(f"illegal loop transition {self.state.value} -> {after.value}")
        before, self.state = self.state, after
        return before

    def _require(self, state: LoopState) -> None:
        if self.state is not state:
            raise RunStateError(f"the loop is {self.state.value}, not {state.value}")
