"""What the loop asks of persistence, as protocols, so that no module of :mod:`harness_lab.loop` imports
``persistence/``, ``store/``, ``timeline/`` or ``checkpoint.py`` (the arrows go one way: persistence -> loop;
``tests/loop/test_run_composed.py`` fails on any such import).

* :class:`RunLog`: what ``Run`` writes to while it steps, once per step (a store's
  :class:`~harness_lab.persistence.checkpoint.Checkpointer` is one): ``commit`` the step, ``before_effect`` (the effect
  ledger: a result means the effect already ran, do not run it again), ``window`` (how much of the trace
  stays in memory).
* :class:`LogSource`: where a run's log comes from and what reads it back: the store-backed operations
  behind ``Run(store=...)``, ``Run.resume``, ``Run.open``, ``run.fork``, ``run.history``, ``run.at`` and
  ``run.rollback(to_step=)``. :class:`harness_lab.persistence.stored.StoreSource` implements it;
  ``harness_lab.Run`` is the loop's run given that source (:mod:`harness_lab.persistence.stored`: the
  composition root). The loop's own ``Run`` has none: a store given to it is refused in one line.

Runs pass through here as ``Any``: the persistence side types them by its own protocols
(:mod:`harness_lab.run_like`), which name the store's types this package must not import.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from ..proposers.base import Proposer
from ..records.actions import Action
from ..records.events import StepRecord
from ..records.tools import ToolResult
from .records import BudgetChoice, StepPoint, StepView

__all__ = ["LogSource", "RunLog"]


class RunLog(Protocol):
    """The log a stored run appends one row per step to (see the module docstring)."""

    @property
    def window(self) -> int:
        """How many records stay in ``run.records`` (events: four times as many); older ones live in the log."""
        ...

    def commit(self, record: StepRecord, workspace_hash: str | None) -> None:
        """Make the step durable (its record, the run's state after it, the workspace it left)."""
        ...

    def before_effect(self, action: Action, key: str) -> ToolResult | None:
        """Called before an action's effect: the recorded result if the effect already ran under ``key``
        (do not run it again), else None (the intent is recorded first where the effect is not repeatable)."""
        ...


class LogSource(Protocol):
    """The store-backed operations of a run (see the module docstring). ``store`` / ``db`` are what the
    caller gave (a store, or for :meth:`open` a path too); ``cls`` is the run class to make."""

    def open_log(self, store: Any, run: Any, *, fresh: bool) -> RunLog:
        """The log of a run made with ``store=`` (``fresh``: a new run, registered in the store)."""
        ...

    def resume(self, cls: Any, store: Any, run_id: str, **given: Any) -> Any:
        """See :meth:`Run.resume <harness_lab.loop.run.Run.resume>`."""
        ...

    def open(self, cls: Any, db: str | Path | Any, run_id: str, proposer: Proposer | None) -> Any:
        """See :meth:`Run.open <harness_lab.loop.run.Run.open>`."""
        ...

    def fork(self, run: Any, checkpoint_id: str | None, at_step: int | None, *, budget: BudgetChoice,
             new_run_id: str | None, workspace: str | Path | None) -> Any:
        """See :meth:`Run.fork <harness_lab.loop.run.Run.fork>` (exactly one of ``checkpoint_id`` and ``at_step``)."""
        ...

    def history(self, run: Any) -> list[StepPoint]:
        """See :attr:`Run.history <harness_lab.loop.run.Run.history>`."""
        ...

    def at(self, run: Any, n: int) -> StepView:
        """See :meth:`Run.at <harness_lab.loop.run.Run.at>`."""
        ...

    def rollback_to(self, run: Any, n: int, *, budget: BudgetChoice) -> None:
        """See :meth:`Run.rollback <harness_lab.loop.run.Run.rollback>` with ``to_step=``."""
        ...
