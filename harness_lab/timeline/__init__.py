"""Time travel over a run's committed steps: every step is a point in time.

``Run.history`` lists one :class:`StepPoint` per step; ``Run.at(n)`` gives the read-only
:class:`StepView` of step n (the context the proposer saw, the proposal, decision, result, verdict,
budget, workspace files and their diff against step n-1); ``Run.open(db, run_id)`` reopens a stored
run for this without taking it over; ``Run.fork(at_step=n, budget=...)`` and
``Run.rollback(to_step=n, budget=...)`` start again from step n with the files the store kept.

Everything is read from the run's store (files included: :mod:`harness_lab.timeline.files` writes the
workspace's changed files beside each row), so it works for a live run, a reopened one and one
resumed after kill -9 alike; a run without a store cannot travel in time.

:class:`Breakpoint` values tell ``run.run(until=...)`` where to stop (:mod:`.breakpoints`); ``compare(a, b)``
finds the first step where two runs differ (:mod:`.compare`).
"""

from __future__ import annotations

from .breakpoints import Breakpoint
from .compare import RunComparison, compare
from .records import BudgetChoice, FileChange, StepPoint, StepView

__all__ = ["Breakpoint", "BudgetChoice", "FileChange", "RunComparison", "StepPoint", "StepView", "compare"]
