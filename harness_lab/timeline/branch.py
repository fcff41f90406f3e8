"""``Run.fork(at_step=n)`` and ``Run.rollback(to_step=n)``: start again from the state at step n, with
the files the store kept for that step and the budget the caller chose."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .records import BudgetChoice

if TYPE_CHECKING:
    from ..run import Run

__all__ = ["fork_at", "rollback_to"]


def fork_at(run: Run, n: int, *, budget: BudgetChoice, new_run_id: str | None,
            workspace: str | Path | None) -> Run:
    raise NotImplementedError


def rollback_to(run: Run, n: int, *, budget: BudgetChoice) -> None:
    raise NotImplementedError
