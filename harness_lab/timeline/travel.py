"""``Run.history``, ``Run.at(n)`` and ``Run.open``: a run's steps folded back from its store rows."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from ..store import Store
from .records import StepPoint, StepView

if TYPE_CHECKING:
    from ..run import Run

__all__ = ["history", "open_run", "step_view"]

_R = TypeVar("_R", bound="Run")


def history(run: Run) -> list[StepPoint]:
    raise NotImplementedError


def step_view(run: Run, n: int) -> StepView:
    raise NotImplementedError


def open_run(cls: type[_R], db: str | Path | Store, run_id: str) -> _R:
    raise NotImplementedError
