"""Clocks passed in, so tests and lessons control time."""

from __future__ import annotations

import time
from typing import Protocol

__all__ = ["Clock", "FakeClock", "SystemClock"]


class Clock(Protocol):
    def now(self) -> float: ...


class SystemClock:
    def now(self) -> float:
        return time.monotonic()


class FakeClock:
    """A clock that moves only when told to (``advance``), optionally by ``tick`` per reading."""

    def __init__(self, start: float = 0.0, tick: float = 0.0) -> None:
        self._now = start
        self._tick = tick

    def now(self) -> float:
        value = self._now
        self._now += self._tick
        return value

    def advance(self, seconds: float) -> None:
        self._now += seconds
