"""The manager's input checks: positive ints, a fraction in (0, 1], callables, a layer, a token counter that
returns counts, text that is UTF-8.

A bad argument is refused with a one-line error naming it; text that cannot be encoded (a lone
surrogate) is repaired, not refused, since it comes from the outside world (a file name, a tool's output).
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable

from .items import Layer

__all__ = ["checked", "interaction_texts", "require_callable", "require_int", "require_layer", "require_non_negative_int",
           "require_positive_int", "require_unit_fraction", "text_arg", "text_or_none_arg", "utf8", "utf8_or_none"]


def require_positive_int(name: str, value: object) -> None:
    # bool is an int, and a float or str compared fine but made fractional budgets and caps
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value!r}")


def require_non_negative_int(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a non-negative int, got {value!r}")


def require_int(name: str, value: object, *, or_none: bool = False) -> None:
    # True sliced as 1, and "a" failed inside the slice with a TypeError that named nothing
    if (value is not None or not or_none) and (isinstance(value, bool) or not isinstance(value, int)):
        raise ValueError(f"{name} must be an int{' or None' if or_none else ''}, got {value!r}")


def require_unit_fraction(name: str, value: object) -> None:
    # a str or None failed in the comparison with a bare TypeError; True compared as 1
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise ValueError(f"{name} must be a number in (0, 1], got {value!r}")


def require_callable(name: str, value: object) -> None:
    # (None: not given) otherwise taken, and failing only when first called: a summarizer at the first compression
    if value is not None and not callable(value):
        raise ValueError(f"{name} must be callable, got {value!r} ({type(value).__name__})")


def require_layer(value: object) -> None:
    if type(value) is not Layer:  # 2 or "L2" failed later on a missing attribute
        raise ValueError(f"layer must be a Layer (Layer.L0 to Layer.L5), got {value!r}")


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


def text_arg(name: str, value: object) -> str:
    """*value* as :func:`utf8` text; anything but a str (None, bytes) is refused naming *name*."""
    if not isinstance(value, str):  # None failed later as an AttributeError on .isascii
        raise ValueError(f"{name} must be a str, got {value!r} ({type(value).__name__})")
    return utf8(value)


def text_or_none_arg(name: str, value: object) -> str | None:
    return None if value is None else text_arg(name, value)


def interaction_texts(action: object, result: object, source: object, key: object) -> tuple[str, str, str, str | None]:
    """add_interaction's slow path (non-ASCII text, or an argument of the wrong type): checked and repaired."""
    return (text_arg("action", action), text_arg("result", result), text_arg("source", source),
            text_or_none_arg("key", key))
