"""Deterministic proposers: a scripted action list, and a plain Python function."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

from ..context import ContextView
from ._counts import whole_count

__all__ = ["FunctionProposer", "ScriptedProposer"]


class ScriptedProposer:
    """Proposes a fixed list of raw actions in order.

    When the script runs out, ``then="repeat_last"`` keeps proposing the last action (seed 004:
    a rejected script keeps asking to finish, so the loop must stop it), ``then="finish"`` proposes
    ``finish``.
    """

    def __init__(self, actions: Sequence[object], then: Literal["repeat_last", "finish"] = "repeat_last") -> None:
        if isinstance(actions, (str, bytes)):  # a Sequence too: it would be proposed a letter a step
            raise ValueError(f"actions: a list of raw actions, got the string {actions[:40]!r}")
        if not actions:
            raise ValueError("a scripted proposer needs at least one action")
        if then not in ("repeat_last", "finish"):  # a typo would silently mean "finish"
            raise ValueError(f"then: {then!r}; choose 'repeat_last' or 'finish'")
        self.actions = list(actions)
        self.then = then
        self.position = 0

    def propose(self, view: ContextView) -> object:
        if self.position < len(self.actions):
            action = self.actions[self.position]
        else:
            action = self.actions[-1] if self.then == "repeat_last" else {"kind": "finish"}
        self.position += 1
        return action

    def state(self) -> dict[str, Any]:
        return {"position": self.position}

    def restore(self, state: dict[str, Any]) -> None:
        given = state.get("position")
        position = whole_count(given)
        if position is None:
            raise ValueError(f"scripted proposer state: position must be a whole number >= 0, got {given!r}")
        self.position = position


class FunctionProposer:
    """Wraps a plain function ``fn(view) -> raw proposal``."""

    def __init__(self, fn: Callable[[ContextView], object]) -> None:
        self.fn = fn

    def propose(self, view: ContextView) -> object:
        return self.fn(view)
