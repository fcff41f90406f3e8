"""A step row's checkpoint read whole again (schema 8): the fold of its delta onto the row it builds on.

A row whose ``base`` column names an earlier step holds, as its checkpoint, only what changed since the row
before it: the keys whose value changed, and under ``"-"`` the keys that are gone. The row ``base`` (at most
``FULL_EVERY`` rows back, see :mod:`harness_lab.persistence.checkpoint`) holds a whole one; any row between may too (a
whole text starts ``{"kind"``). Folding is a dict update per row, so reading step n costs the same at step
10 and at step 10,000. Texts are read by orjson and written back by it, the standard library taking over
only for what orjson refuses (``NaN``/``Infinity``) or would misread (integers past 64 bits, read as floats):
then it writes them back too, as they were.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import orjson

__all__ = ["GONE", "SHARED", "WHOLE", "dumps", "fold", "loads"]

WHOLE = '{"kind"'  # how a whole checkpoint text starts (every form; a delta never holds "kind")
GONE = "-"  # a delta's list of the keys the row before had and this one has not
# (schema 9) the key of a context item a row names by the sha256 of its text in the blobs (_context_rows.py)
SHARED = "$sha256"


def fold(whole: str, deltas: Iterable[str]) -> str:
    """The whole checkpoint text after applying ``deltas`` (oldest first) to ``whole``; a ``ValueError``
    (or ``TypeError``) names what is wrong with a text that is not of its form."""
    data, exact = _loads(whole)
    if not isinstance(data, dict):
        raise ValueError(f"the whole checkpoint it builds on is a JSON {type(data).__name__}, not an object")
    for text in deltas:
        delta, plain = _loads(text)
        exact = exact and plain
        if not isinstance(delta, dict):
            raise ValueError(f"a checkpoint delta is a JSON {type(delta).__name__}, not an object")
        if text.startswith(WHOLE):
            data = delta
            continue
        gone = delta.pop(GONE, [])
        if not isinstance(gone, list):
            raise ValueError(f"a checkpoint delta's {GONE!r} is not a list of keys")
        for key in gone:
            data.pop(key, None)
        data.update(delta)
    return dumps(data) if exact else json.dumps(data, separators=(",", ":"), ensure_ascii=False)


def dumps(value: Any) -> str:
    """Compact JSON, non-ASCII kept, by orjson; an integer past 64 bits by the standard library (same text).
    A float that is not finite must not reach it (orjson writes ``null``): :func:`fold` sees to that."""
    try:
        return orjson.dumps(value).decode()
    except TypeError:  # orjson.JSONEncodeError: an integer it cannot hold
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def loads(text: str) -> Any:
    """``json.loads(text)``, by orjson where it can (~5x faster on a manifest row); the standard library
    reads what orjson refuses (an escaped lone surrogate, as a path may hold; ``NaN``) or would misread (a
    long integer), so the result never differs."""
    return _loads(text)[0]


# A run of 19 digits: maybe an integer past 64 bits, which orjson reads as a float (1e29 for 10**29, no
# error); json.loads reads it exactly. A 64-hex sha256 holds such a run rarely (~0.6%): read the slower way.
# Found in the bytes with every digit made 0 (~2 µs for a 6 KB context state; a regex scan took ~90).
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
_LONG_NUMBER = b"0" * 19


def _loads(text: str) -> tuple[Any, bool]:
    """The parsed text, and whether orjson read it (else it held what orjson refuses or would misread;
    json.loads decides)."""
    if _LONG_NUMBER not in text.encode("utf-8", "surrogatepass").translate(_DIGITS_AS_ZERO):
        try:
            return orjson.loads(text), True
        except orjson.JSONDecodeError:
            pass
    return json.loads(text), False
