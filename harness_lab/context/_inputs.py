"""The manager's input checks: positive ints, a token counter that returns counts, text that is UTF-8.

A bad argument is refused with a one-line error naming it; text that cannot be encoded (a lone
surrogate) is repaired, not refused, since it comes from the outside world (a file name, a tool's output).
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable

__all__ = ["checked", "require_positive_int", "utf8", "utf8_or_none"]


def require_positive_int(name: str, value: object) -> None:
    # bool is an int, and a float or str compared fine but made fractional budgets and caps
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value!r}")


def checked(counter: Callable[[str], int]) -> Callable[[str], int]:
    """*counter*, refusing what is not a token count: a negative or missing count would make the
    total (and the run's token budget, which spends it) meaningless, silently."""
    name = getattr(counter, "__qualname__", None) or type(counter).__name__

    def count(text: str) -> int:
        n = counter(text)
        try:
            ok = not isinstance(n, bool) and operator.index(n) >= 0  # an int, or an int-like (numpy)
        except TypeError:
            ok = False
        if not ok:
            raise ValueError(f"token counter {name} returned {n!r} for a text of {len(text)} chars; "
                             "a counter must return a non-negative int")
        return operator.index(n)

    count.__wrapped__ = counter  # type: ignore[attr-defined]
    return count


_SURROGATE = re.compile("[\ud800-\udfff]")


def utf8(text: str) -> str:
    """*text* with each lone surrogate (a non-UTF-8 byte in a file name that os.listdir decoded, say)
    as U+FFFD: such a str cannot be encoded, counted, stored or shown to a model."""
    return text if text.isascii() or _SURROGATE.search(text) is None else _SURROGATE.sub("\ufffd", text)


def utf8_or_none(text: str | None) -> str | None:
    return None if text is None else utf8(text)
