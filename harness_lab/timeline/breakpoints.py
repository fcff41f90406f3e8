"""Breakpoints: where ``run.run(until=...)`` (and the dashboard's "Run to") stops.

``until`` is a :class:`~harness_lab.records.states.RunState` (as before: stop once the run is in it), a
:class:`Breakpoint`, a callable given each :class:`~harness_lab.records.events.StepRecord` as it is taken (stop
when it returns true), or a list of these (stop at the first met)::

    run.run(until=Breakpoint.tool("write_report"))   # before that call executes: it is run.pending
    run.run(until=Breakpoint.state(RunState.RUNNING))  # after the step that enters the state
    run.run(until=Breakpoint.step(3))                # after step 3
    run.run(until=Breakpoint.verdict(accepted=False))  # after a finish whose report was rejected
    run.run(until=Breakpoint.budget(0.5))            # after the step that spends half of any budget

A tool breakpoint stops *before* the matching proposal executes (it stays pending, to read, edit or
approve); calling ``run`` again from there executes it and goes on to the next match. The others stop
*after* the step that meets them. A breakpoint is plain data: it never imports the run.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol, TypeAlias

from ..contract import ControlContract
from ..records.actions import TOOL_KINDS
from ..records.events import StepRecord, Usage
from ..records.proposal import Proposal
from ..records.states import RunState

__all__ = ["Breakpoint", "Stops", "Until", "spent_fraction"]

_On = Literal["tool", "state", "step", "verdict", "budget"]


class _Running(Protocol):
    """What a breakpoint reads of a run (so that this module does not import it)."""

    @property
    def usage(self) -> Usage: ...
    @property
    def pending(self) -> Proposal | None: ...
    contract: ControlContract
    step_no: int


@dataclass(frozen=True)
class Breakpoint:
    """One stop condition; make it with :meth:`tool`, :meth:`state`, :meth:`step`, :meth:`verdict` or
    :meth:`budget` (bad values: one-line ``ValueError`` naming them)."""

    on: _On
    value: str | RunState | int | bool | float | None

    @classmethod
    def tool(cls, kind: str) -> Breakpoint:
        """Before a proposal of this tool kind executes (e.g. ``"write_report"``, ``"push"``)."""
        if not isinstance(kind, str) or kind not in TOOL_KINDS:
            raise ValueError(f"Breakpoint.tool: unknown tool kind {kind!r}; one of {', '.join(sorted(TOOL_KINDS))}")
        return cls("tool", kind)

    @classmethod
    def state(cls, state: RunState | str) -> Breakpoint:
        """After the step that leaves the run in ``state``."""
        try:
            return cls("state", RunState(state))
        except ValueError:
            names = ", ".join(s.value for s in RunState)
            raise ValueError(f"Breakpoint.state: unknown run state {state!r}; one of {names}") from None

    @classmethod
    def step(cls, n: int) -> Breakpoint:
        """After step ``n`` (a step still to come)."""
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ValueError(f"Breakpoint.step: a step number >= 1, got {n!r}")
        return cls("step", n)

    @classmethod
    def verdict(cls, accepted: bool | None = None) -> Breakpoint:
        """After a step that validated the report: any verdict, or only an accepted (True) / rejected (False) one."""
        if accepted is not None and not isinstance(accepted, bool):
            raise ValueError(f"Breakpoint.verdict: accepted is True, False or None, got {accepted!r}")
        return cls("verdict", accepted)

    @classmethod
    def budget(cls, fraction: float) -> Breakpoint:
        """After the step that brings any of the run's budgets (decisions, tool calls, tokens, wall clock)
        to ``fraction`` of its limit or more (0 < fraction <= 1)."""
        if (not isinstance(fraction, (int, float)) or isinstance(fraction, bool) or not math.isfinite(fraction)
                or not 0 < fraction <= 1):
            raise ValueError(f"Breakpoint.budget: a fraction in (0, 1], got {fraction!r}")
        return cls("budget", float(fraction))

    def __str__(self) -> str:
        if self.on == "verdict":
            return "verdict" if self.value is None else f"verdict accepted={self.value}"
        if self.on == "state" and isinstance(self.value, RunState):
            return f"state {self.value.value}"
        return f"{self.on} {self.value}"

    def before(self, proposal: Proposal | None) -> bool:
        """Whether the run stops with ``proposal`` pending, before it executes (tool breakpoints only)."""
        if self.on != "tool" or proposal is None or proposal.action is None:
            return False
        return proposal.action.kind == self.value

    def after(self, run: _Running, record: StepRecord) -> bool:
        """Whether the run stops after the step ``record`` (every kind but tool)."""
        if self.on == "state":
            return record.state_after is self.value
        if self.on == "step":
            return record.step == self.value
        if self.on == "verdict":
            return record.verdict is not None and (self.value is None or record.verdict.accepted is self.value)
        if self.on == "budget":
            assert isinstance(self.value, float)
            return spent_fraction(run) >= self.value
        return False


def spent_fraction(run: _Running) -> float:
    """The largest share of a budget limit the run has spent (0.0 with no limits)."""
    used, limits = run.usage, run.contract.budget
    pairs = [(used.decisions, limits.max_decisions), (used.tool_calls, limits.max_tool_calls),
             (used.tokens, limits.max_tokens), (used.elapsed_s, limits.wall_clock_seconds)]
    return max((spent / limit for spent, limit in pairs if limit), default=0.0)


Predicate = Callable[[StepRecord], object]
_One: TypeAlias = RunState | Breakpoint | Predicate
Until: TypeAlias = _One | list[_One] | tuple[_One, ...] | None


class Stops:
    """``until`` read once for one ``run()`` call: the state to stop in, the tool breakpoints checked on
    the pending proposal, the rest after each step."""

    def __init__(self, until: Until, *, step_no: int) -> None:
        # a RunState is a str (a Sequence): only a list or tuple is many
        given = list(until) if isinstance(until, (list, tuple)) else [until]
        self.states: set[RunState] = set()
        self.tools: list[Breakpoint] = []
        self.afters: list[Breakpoint] = []
        self.predicates: list[Predicate] = []
        for item in given:
            if item is None:
                continue
            if isinstance(item, RunState):
                self.states.add(item)
            elif isinstance(item, Breakpoint):
                if item.on == "step" and isinstance(item.value, int) and item.value <= step_no:
                    raise ValueError(f"until: step {item.value} is past (the run is at step {step_no})")
                (self.tools if item.on == "tool" else self.afters).append(item)
            elif callable(item):
                self.predicates.append(item)
            else:
                raise ValueError(f"until: a RunState, a Breakpoint or a callable taking a StepRecord, got {item!r}")

    def in_state(self, state: RunState) -> bool:
        return state in self.states

    def before(self, run: _Running, resumed_from: Proposal | None) -> Proposal | None:
        """The pending proposal a tool breakpoint stops before, or None. ``resumed_from``: the proposal
        the last ``run()`` stopped before: continuing executes it (asks the proposer only with tool
        breakpoints set: ``pending`` would ask it one step early otherwise)."""
        if not self.tools:
            return None
        pending = run.pending
        if pending is None or pending is resumed_from:
            return None
        return pending if any(b.before(pending) for b in self.tools) else None

    def after(self, run: _Running, record: StepRecord) -> bool:
        return any(b.after(run, record) for b in self.afters) or any(bool(p(record)) for p in self.predicates)
