"""The composition root of a run with persistence: :class:`StoreSource` implements the loop's
:class:`~harness_lab.loop.log.LogSource` with the store-backed operations (checkpoints, resume, fork,
time travel), and :class:`Run` is the loop's :class:`~harness_lab.loop.run.Run` given it, which
``harness_lab.Run`` names.

The arrows go one way, persistence -> loop: the loop asks its ``source`` collaborator, this module
wires it (a class attribute of the subclass, no registry, nothing done at import). The subclass adds no
method: it only binds the source, and says which of the persistence side's types its slots hold.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from ..loop.log import LogSource
from ..loop.records import BudgetChoice, StepPoint, StepView
from ..loop.run import Run as LoopRun
from ..proposers.base import Proposer
from ..store import Store
from ..timeline.branch import fork_at, rollback_to
from ..timeline.travel import history, open_run, step_view
from .checkpoint import Checkpointer
from .fork import fork_run
from .resume import ResumeReport, _trace_in_store, resume_run

__all__ = ["Run", "StoreSource"]


class StoreSource:
    """The store-backed operations of a run (see :class:`~harness_lab.loop.log.LogSource`)."""

    def open_log(self, store: Store, run: Any, *, fresh: bool) -> Checkpointer:
        _trace_in_store(run)  # Run.from_scenario gives the store after the run was made
        return Checkpointer(store, run, fresh=fresh)

    def resume(self, cls: Any, store: Store, run_id: str, **given: Any) -> Any:
        return resume_run(cls, store, run_id, **given)

    def open(self, cls: Any, db: str | Path | Store, run_id: str, proposer: Proposer | None) -> Any:
        return open_run(cls, db, run_id, proposer)

    def fork(self, run: Any, checkpoint_id: str | None, at_step: int | None, *, budget: BudgetChoice,
             new_run_id: str | None, workspace: str | Path | None) -> Any:
        if at_step is not None:
            return fork_at(run, at_step, budget=budget, new_run_id=new_run_id, workspace=workspace)
        assert checkpoint_id is not None
        return fork_run(run, checkpoint_id, new_run_id=new_run_id, workspace=workspace, budget=budget)

    def history(self, run: Any) -> list[StepPoint]:
        return history(run)

    def at(self, run: Any, n: int) -> StepView:
        return step_view(run, n)

    def rollback_to(self, run: Any, n: int, *, budget: BudgetChoice) -> None:
        rollback_to(run, n, budget=budget)


class Run(LoopRun):
    """A :class:`~harness_lab.loop.run.Run` with persistence: ``store=``, ``Run.resume``, ``Run.open``,
    ``fork``, ``history``, ``at``, ``rollback(to_step=)`` (its ``source``; see the module docstring)."""

    source: ClassVar[LogSource | None] = StoreSource()
    # the persistence side's types of the slots the loop keeps as its own protocols (what resume,
    # fork and time travel read: harness_lab.run_like, checkpoint.CheckpointedRun, resume.ResumableRun)
    checkpoints: Checkpointer | None
    resume_report: ResumeReport | None
    _travel_store: Store | None
