"""What a run used, counted where it is spent (decisions, tool calls, tokens, elapsed time).

Mutable inside the run (the gates read the counters mid-step); the frozen :class:`~harness_lab.events.Usage`
is made only when someone reads ``run.usage``, and again only after a counter moved.
:class:`~harness_lab.loop.run.Run` owns one; read :mod:`harness_lab.loop.run` first.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..records.events import Usage
from ._step_records import usage

__all__ = ["Counters"]


@dataclass(slots=True)
class Counters:
    """The run's counters, and the last :class:`Usage` made of them."""

    decisions: int = 0
    tool_calls: int = 0
    tokens: int = 0
    elapsed_s: float = 0.0
    _made: Usage | None = field(default=None, repr=False, compare=False)

    @classmethod
    def of(cls, value: Usage) -> Counters:
        return cls(value.decisions, value.tool_calls, value.tokens, value.elapsed_s, value)

    def usage(self) -> Usage:
        made = self._made
        if (made is None or made.decisions != self.decisions or made.tool_calls != self.tool_calls
                or made.tokens != self.tokens or made.elapsed_s != self.elapsed_s):
            made = self._made = usage(self.decisions, self.tool_calls, self.tokens, self.elapsed_s)
        return made
