"""Every exception harness-lab raises, in one place.

Expected failures (a refused tool call, a failed check, a malformed proposal) are *data*
(see :mod:`harness_lab.records.tools` and :mod:`harness_lab.validation`), never exceptions. These
classes are for misuse of the API or a broken environment::

    HarnessLabError                 base of everything below
    +-- ConfigError                 a contract / scenario / evidence file is missing or malformed
    +-- WorkspaceError              a workspace cannot be used (e.g. a fresh run finds an old draft)
    +-- RunStateError               a call that the run's current state does not allow
    |                               (step() after a terminal state, approve() with nothing pending)
    +-- StoreError                  the checkpoint store is unusable (corrupt, foreign, newer schema,
    |                               unknown run id)
    +-- SandboxEnvironmentError     the machine lacks something the sandbox cannot work without
    +-- LocalModelError             the local model server cannot be built or started
    |                               (:mod:`harness_lab.proposers.local_model`: no cmake, no cache, it died)
    +-- SimulatedCrash              an injected fault: the process "dies" at a crash point of a step
                                    (:class:`harness_lab.faults.CrashPoint`); tests resume from it
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "HarnessLabError",
    "LocalModelError",
    "RunStateError",
    "SandboxEnvironmentError",
    "SimulatedCrash",
    "StoreError",
    "WorkspaceError",
]


class HarnessLabError(Exception):
    """Base class: the message is one line a user can act on."""


class ConfigError(HarnessLabError):
    """A contract, scenario or evidence file is missing or malformed (the message names the file)."""


class WorkspaceError(HarnessLabError):
    """A workspace cannot be used as asked."""


class RunStateError(HarnessLabError):
    """The run's current state does not allow this call."""


class StoreError(HarnessLabError):
    """The checkpoint store cannot be used."""


class SandboxEnvironmentError(HarnessLabError):
    """The machine lacks something the sandbox needs and cannot do without."""


class LocalModelError(HarnessLabError):
    """The local model server cannot be built or started (the message says what to install or run)."""


class SimulatedCrash(HarnessLabError):
    """The ``process_crash`` fault: raised at an instrumented point of a step, standing in for a kill.

    ``point`` is the :class:`harness_lab.faults.CrashPoint` value where it was raised. The run that
    raised it refuses further steps; resume from a checkpoint or snapshot instead.
    """

    def __init__(self, point: str, step: int) -> None:
        super().__init__(f"simulated crash at {point} of step {step}")
        self.point = point
        self.step = step
