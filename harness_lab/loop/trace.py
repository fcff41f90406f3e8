"""A run's trace: every event in order (``events``, numbered by ``seq``), and those of the step under way
(``step_events``), which its :class:`~harness_lab.records.events.StepRecord` takes when the step closes
(``Run._close``, which empties it).

:class:`~harness_lab.loop.run.Run` owns one (``run.trace``; ``run.events`` is its list); read
:mod:`harness_lab.loop.run` first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..records.events import Event
from .record_log import RecordLog

__all__ = ["Trace"]


class Trace:
    """Appends events, numbers them, and hands a step its own."""

    __slots__ = ("events", "seq", "step_events")

    def __init__(self, events: RecordLog[Event]) -> None:
        self.events = events  # with a store, only a window of it (the rest is in the store); without, packed
        self.step_events: list[Event] = []
        self.seq = 0

    def add(self, make: Callable[..., Event], *args: Any) -> None:
        """Append the event ``make(seq, *args)`` (a step's own record makers: ``proposed``, ``tool_called``),
        numbered next."""
        self.seq += 1
        event = make(self.seq, *args)
        self.step_events.append(event)
        self.events.append(event)

    def emit(self, event_type: Callable[..., Event], step: int, **fields: Any) -> None:
        self.seq += 1
        event = event_type(seq=self.seq, step=step, **fields)
        self.step_events.append(event)
        self.events.append(event)

    def undo_step(self, step: int) -> list[Event]:
        """Drop the events of ``step`` (abandoned: nothing was decided in it) and give them back; their
        numbers are given out again."""
        buffered, mine = self.step_events, 0
        while mine < len(buffered) and buffered[-1 - mine].step == step:
            mine += 1
        undone = buffered[len(buffered) - mine:]
        if mine:
            del buffered[-mine:]
            del self.events[-mine:]
        self.seq -= mine
        return undone
