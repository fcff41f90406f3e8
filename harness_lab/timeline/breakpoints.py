"""Moved to :mod:`harness_lab.loop.breakpoints` (``run.run(until=...)`` is the loop's; issue 20: loop/ imports
nothing of timeline/). Kept so the imports of this name go on working."""

from ..loop.breakpoints import Breakpoint, Stops, Until, spent_fraction

__all__ = ["Breakpoint", "Stops", "Until", "spent_fraction"]
