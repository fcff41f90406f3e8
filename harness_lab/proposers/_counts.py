"""The one check of a count a proposer takes or reports: a whole number >= 0, never a bool.

Each caller decides what a value that is not one means: ``ProposerOutput`` and the scripted
proposer's state refuse it, an endpoint's reported usage counts as not reported.
"""

from __future__ import annotations


def whole_count(value: object) -> int | None:
    """``value`` when it is an ``int`` >= 0 (``True`` is an int too, but not a count), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
