"""The budget a fork or rollback from a step starts with (``budget="keep" | "fresh" | {...}``)."""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import ConfigError
from ..records.events import Usage
from .records import BudgetChoice

__all__ = ["check_budget", "spend"]

_FIELDS = {"decisions": int, "tool_calls": int, "tokens": int, "elapsed_s": float}


def check_budget(budget: BudgetChoice) -> None:
    """Refuse a budget choice that is neither "keep", "fresh" nor a mapping of spend fields to
    non-negative numbers, in one line naming the value (before anything is made or written)."""
    if isinstance(budget, str):
        if budget not in ("keep", "fresh"):
            raise ConfigError(f"budget {budget!r}: 'keep', 'fresh' or a mapping of {', '.join(_FIELDS)}")
        return
    if not isinstance(budget, Mapping):
        raise ConfigError(f"budget {budget!r}: 'keep', 'fresh' or a mapping of {', '.join(_FIELDS)}")
    for key, value in budget.items():
        if key not in _FIELDS:
            raise ConfigError(f"budget key {key!r}: not a spend field (known: {', '.join(_FIELDS)})")
        whole = _FIELDS[key] is int
        if (isinstance(value, bool) or not isinstance(value, int if whole else (int, float))
                or not value >= 0 or value == float("inf")):
            raise ConfigError(f"budget {key}={value!r}: a {'whole ' if whole else ''}number >= 0")


def spend(at: Usage, budget: BudgetChoice) -> Usage:
    """What a run starts with spent, given the spend ``at`` the step it starts from."""
    check_budget(budget)
    if budget == "keep":
        return at
    if budget == "fresh":
        return Usage()
    assert isinstance(budget, Mapping)
    return at.model_copy(update={k: _FIELDS[k](v) for k, v in budget.items()})
