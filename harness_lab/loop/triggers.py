"""``trigger.still_valid`` re-verified: at a run's start and at every resume, by a check the contract names.

The contract writes a static switch (``still_valid: false`` means the trigger no longer holds) or a
named check with its parameters::

    trigger:
      source: issue-tracker
      condition: ticket 42 is open
      still_valid: {check: file_exists, path: tickets/42.open}

The name is looked up in a mapping passed to the run (``Run(trigger_checks=...)``, ``Run.resume(...,
trigger_checks=...)``); :data:`DEFAULT_TRIGGER_CHECKS` when none is given. There is no global registry: a
check a caller adds is in the mapping it passes. An unknown name, or a parameter a check lacks or does
not take, is a one-line :class:`~harness_lab.errors.ConfigError` when the run is made.

A run whose trigger does not hold when its first step starts does not start: that step stops it BLOCKED
with stop code :data:`TRIGGER_INVALID` (data, as every expected failure: recorded in the trace and the
store, classified by the external loop as unrecoverable, and shown in a checkpoint; a refusal raised at
construction would leave nothing behind and miss a trigger that stops holding between making the run and
starting it). A resume whose trigger stopped holding is refused by resume's ``trigger`` check.

Paths are relative to the run's workspace unless absolute (the trigger is the outside world's: a
ticket file may live anywhere the harness process can see).
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ..contract import Trigger, TriggerCheck
from ..errors import ConfigError

__all__ = ["DEFAULT_TRIGGER_CHECKS", "TRIGGER_INVALID", "TriggerTest", "check_trigger", "trigger_holds"]

TRIGGER_INVALID = "trigger_invalid"  # the stop code of a run whose trigger no longer held at its start


@dataclass(frozen=True)
class TriggerTest:
    """A named check: the parameters it needs, and ``holds(params, workspace)``: None when the trigger
    holds, else why it does not (one line)."""

    needs: tuple[str, ...]
    holds: Callable[[Mapping[str, Any], Path], str | None]


def _where(params: Mapping[str, Any], workspace: Path) -> Path:
    path = Path(str(params["path"]))
    return path if path.is_absolute() else workspace / path


def _file_exists(params: Mapping[str, Any], workspace: Path) -> str | None:
    return None if os.path.lexists(_where(params, workspace)) else f"{params['path']} does not exist"


def _file_absent(params: Mapping[str, Any], workspace: Path) -> str | None:
    return f"{params['path']} exists" if os.path.lexists(_where(params, workspace)) else None


DEFAULT_TRIGGER_CHECKS: Mapping[str, TriggerTest] = MappingProxyType({
    "file_exists": TriggerTest(("path",), _file_exists),
    "file_absent": TriggerTest(("path",), _file_absent),
})


def check_trigger(trigger: Trigger, checks: Mapping[str, TriggerTest]) -> None:
    """Refuse, in one ConfigError line, a named check ``checks`` does not hold or parameters it does not take."""
    spec = trigger.still_valid
    if not isinstance(spec, TriggerCheck):
        return
    test = checks.get(spec.check)
    if test is None:
        close = difflib.get_close_matches(spec.check, sorted(checks), n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(sorted(checks)) or 'none'}"
        raise ConfigError(f"trigger.still_valid: no check named {spec.check!r}; {hint}")
    params = spec.params
    if missing := [p for p in test.needs if p not in params]:
        raise ConfigError(f"trigger.still_valid: check {spec.check!r} needs the parameter {missing[0]!r}")
    if unknown := sorted(set(params) - set(test.needs)):
        raise ConfigError(f"trigger.still_valid: check {spec.check!r} takes no parameter {unknown[0]!r} "
                          f"(it takes: {', '.join(test.needs) or 'none'})")


def trigger_holds(trigger: Trigger, checks: Mapping[str, TriggerTest], workspace: Path) -> tuple[bool, str]:
    """Whether the trigger holds now, and a line saying so (checked first by :func:`check_trigger`)."""
    spec, said = trigger.still_valid, f"{trigger.source}: {trigger.condition}"
    if isinstance(spec, bool):
        return spec, said + ("" if spec else " no longer holds (still_valid: false)")
    try:
        why = checks[spec.check].holds(spec.params, workspace)
    except OSError as exc:  # cannot be looked at: it cannot be shown to hold
        why = f"{type(exc).__name__}: {exc.strerror or exc}"
    if why is None:
        return True, f"{said} (check {spec.check}: holds)"
    return False, f"{said} no longer holds (check {spec.check}: {why})"
