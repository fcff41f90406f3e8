"""Explicit state machines: an enum plus one transitions table each.

Run states (seed 004)::

    CREATED -> RUNNING
                 |- read / write            -> RUNNING
                 |- finish                  -> VALIDATING -> REVIEW_READY   (all checks pass)
                 |                                       \\-> RUNNING        (+ failure reasons)
                 |- gated action            -> WAITING_FOR_HUMAN -> RUNNING (approved) | BLOCKED
                 |- forbidden action        -> BLOCKED
                 |- endpoint failed N times -> WAITING_FOR_ENDPOINT -> RUNNING (it answered again)
                 \\- budget spent            -> EXHAUSTED

WAITING_FOR_ENDPOINT is not terminal: the model's endpoint, not the model, failed (down, 5xx, a wrong
key); the run's checkpoint resumes it once the endpoint answers, with nothing spent meanwhile.

REVIEW_READY means "the mechanical checks passed": not "true", not "delivered".

External-loop states (seed 000): ready, running, waiting_for_human, blocked, completed.
"""

from __future__ import annotations

from enum import Enum

__all__ = [
    "LOOP_TRANSITIONS",
    "RUN_TRANSITIONS",
    "TERMINAL_STATES",
    "LoopState",
    "RunState",
    "can_transition",
]


class RunState(str, Enum):
    CREATED = "CREATED"
    RUNNING = "RUNNING"
    VALIDATING = "VALIDATING"
    WAITING_FOR_HUMAN = "WAITING_FOR_HUMAN"
    WAITING_FOR_ENDPOINT = "WAITING_FOR_ENDPOINT"
    REVIEW_READY = "REVIEW_READY"
    BLOCKED = "BLOCKED"
    EXHAUSTED = "EXHAUSTED"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_STATES


TERMINAL_STATES = frozenset({RunState.REVIEW_READY, RunState.BLOCKED, RunState.EXHAUSTED})

RUN_TRANSITIONS: dict[RunState, frozenset[RunState]] = {
    RunState.CREATED: frozenset({RunState.RUNNING}),
    RunState.RUNNING: frozenset(
        {
            RunState.RUNNING,
            RunState.VALIDATING,
            RunState.WAITING_FOR_HUMAN,
            RunState.WAITING_FOR_ENDPOINT,
            RunState.BLOCKED,
            RunState.EXHAUSTED,
        }
    ),
    RunState.VALIDATING: frozenset({RunState.RUNNING, RunState.REVIEW_READY, RunState.BLOCKED}),
    RunState.WAITING_FOR_HUMAN: frozenset({RunState.RUNNING, RunState.BLOCKED, RunState.EXHAUSTED}),
    RunState.WAITING_FOR_ENDPOINT: frozenset({RunState.RUNNING, RunState.BLOCKED, RunState.EXHAUSTED}),
    RunState.REVIEW_READY: frozenset(),
    RunState.BLOCKED: frozenset(),
    RunState.EXHAUSTED: frozenset(),
}


class LoopState(str, Enum):
    READY = "ready"
    RUNNING = "running"
    WAITING_FOR_HUMAN = "waiting_for_human"
    BLOCKED = "blocked"
    COMPLETED = "completed"


LOOP_TRANSITIONS: dict[LoopState, frozenset[LoopState]] = {
    LoopState.READY: frozenset({LoopState.RUNNING, LoopState.BLOCKED}),
    LoopState.RUNNING: frozenset(
        {LoopState.COMPLETED, LoopState.READY, LoopState.WAITING_FOR_HUMAN, LoopState.BLOCKED}
    ),
    LoopState.WAITING_FOR_HUMAN: frozenset({LoopState.RUNNING, LoopState.BLOCKED}),
    LoopState.BLOCKED: frozenset(),
    LoopState.COMPLETED: frozenset(),
}


def can_transition(before: RunState, after: RunState) -> bool:
    return after in RUN_TRANSITIONS[before]
