"""Crashes of a run's steps, simulated and real: a crash point a ``process_crash`` fault may strike, and a
Ctrl-C (any BaseException that is not an Exception) mid-step, which is recorded as a crash there.

A crashed run refuses further steps in one line (``why``); with a store, ``Run.resume`` continues it from
its last checkpoint, deciding from the effect ledger what an interrupted effect did, as after kill -9.
:class:`~harness_lab.loop.run.Run` owns one (``run.crash``); read :mod:`harness_lab.loop.run` first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import RunStateError
from ..faults import CrashPoint, FaultSchedule
from ..faults.base import FaultTarget

__all__ = ["CrashGuard"]


class CrashGuard:
    """Where and why the run crashed (``crashed``, ``cause``), and the crash points a step visits."""

    __slots__ = ("_faults", "_note", "_run", "cause", "crashed")

    def __init__(self, faults: FaultSchedule, run: FaultTarget,
                 note: Callable[[str, str, dict[str, Any]], None]) -> None:
        self._faults, self._run, self._note = faults, run, note  # note(topic, message, data): a trace note
        self.crashed: CrashPoint | None = None
        self.cause = "simulated"  # or how a real interrupt struck (see interrupted)

    def point(self, point: CrashPoint) -> None:
        """A crash point of the step: a crash fault armed for it strikes here (SimulatedCrash)."""
        if self._faults.armed and (crash := self._faults.crash(self._run, point)) is not None:
            self.crashed = point
            raise crash

    def interrupted(self, exc: BaseException, point: CrashPoint, tool: str | None, during: str = "execute") -> None:
        """A Ctrl-C (any BaseException that is not an Exception) at ``point`` of a step, ``during``
        one of its parts (execute, observe, validate, close): as a crash there, the run refuses further
        steps and the step stays unrecorded. An effect's outcome is unknown, so it must not be repeated
        blindly: with a store, ``Run.resume`` decides from the ledger, as after kill -9. The caller re-raises."""
        if isinstance(exc, Exception) or self.crashed is not None:
            return  # a tool's error is the executor's to report; a simulated crash is already recorded
        step = self._run.step_no
        self.crashed, self.cause = point, f"interrupted: {type(exc).__name__}"
        self._note("interrupted",
                   f"{self.why()} during {during} ({tool or 'no action'}) of step {step}; "
                   "the step is unrecorded and its outcome unknown: resume from a checkpoint",
                   {"point": point.value, "tool": tool, "interrupt": type(exc).__name__, "during": during})
        self._faults.abandon(f"the run was interrupted at {point.value} of step {step}")

    def why(self) -> str:
        assert self.crashed is not None
        return f"crashed at {self.crashed.value} ({self.cause})"

    def refuse(self, run_id: str) -> None:
        """Refuse what a crashed run cannot do, in one line."""
        if self.crashed is not None:
            raise RunStateError(f"run {run_id} {self.why()}; resume from a checkpoint")
