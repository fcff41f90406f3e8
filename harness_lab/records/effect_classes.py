"""How a resume treats an action that was in flight at a crash: one classification, by action type
(the run holds actions) and by name (the side-effect ledger and tool results carry names).

* ``read``: nothing to make durable first (reads, ``think``, ``finish``);
* ``redoable``: lands in the workspace and is redone byte for byte (``write_file``, ``write_report``);
* ``workspace``: lands in the workspace only (``delete_file``, ``run_command``);
* ``external``: the outside world (gated actions, and any name the harness does not know): its
  outcome cannot be checked from here, so it is never retried silently.
"""

from __future__ import annotations

from typing import Literal

from .actions import (
    ACTION_MODELS,
    EXTERNAL_KINDS,
    ActionBase,
    DeleteFile,
    GatedAction,
    RunCommand,
    WriteFile,
    WriteReport,
)

__all__ = ["READ_ACTIONS", "READ_TOOLS", "EffectClass", "effect_class", "effect_of_tool"]

EffectClass = Literal["read", "redoable", "workspace", "external"]

READ_TOOLS = frozenset({"read_evidence", "read_file", "read_ref", "list_dir"})
"""The tools that read (of class ``read``): an empty result of one is no success (the executor's safety net)."""


def effect_class(action: ActionBase) -> EffectClass:
    """How a resume treats this action if it was in flight at a crash (it reads only the type)."""
    kind = type(action)
    found = _EFFECT_BY_TYPE.get(kind)
    return found if found is not None else _class_of(kind)


def effect_of_tool(name: str) -> EffectClass:
    """:func:`effect_class` by the name a ledger entry or a tool result carries: an action kind (``write_report``'s
    result is named ``write_file``, of the same class). A name it does not know is ``external``:
    nothing the harness can check."""
    return _EFFECT_BY_NAME.get(name, "external")


def _class_of(kind: type[ActionBase]) -> EffectClass:
    if issubclass(kind, GatedAction):
        return "external"  # the outside world: its outcome cannot be checked from here
    if issubclass(kind, (WriteFile, WriteReport)):
        return "redoable"
    if issubclass(kind, (DeleteFile, RunCommand)):
        return "workspace"
    return "read"


# The one classification, looked up (pydantic's isinstance runs Python code: ~0.2 µs a check).
_ACTION_TYPES: list[type[ActionBase]] = [*ACTION_MODELS.values(), GatedAction]
_EFFECT_BY_TYPE: dict[type[ActionBase], EffectClass] = {m: _class_of(m) for m in _ACTION_TYPES}
# The action types that only read (a step's "is it a read?" as one set lookup; a subclass: effect_class).
READ_ACTIONS = frozenset(model for model, found in _EFFECT_BY_TYPE.items() if found == "read")
_EFFECT_BY_NAME: dict[str, EffectClass] = {**dict.fromkeys(EXTERNAL_KINDS, "external"),
                                           **{kind: _class_of(m) for kind, m in ACTION_MODELS.items()}}


