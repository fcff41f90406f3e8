"""Moved to :mod:`harness_lab.loop.budget` (a rollback to a snapshot sets the budget too; issue 20: loop/
imports nothing of timeline/). Kept so the imports of these names go on working."""

from ..loop.budget import check_budget, spend

__all__ = ["check_budget", "spend"]
