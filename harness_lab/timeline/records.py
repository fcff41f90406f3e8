"""Moved to :mod:`harness_lab.loop.records` (the types ``run.history`` / ``run.at`` return; issue 20:
loop/ imports nothing of timeline/). Kept so the imports of these names go on working."""

from ..loop.records import ROLLED_BACK, BudgetChoice, FileChange, StepPoint, StepView

__all__ = ["ROLLED_BACK", "BudgetChoice", "FileChange", "StepPoint", "StepView"]
