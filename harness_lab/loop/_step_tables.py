"""The action-model tables a step consults on every call, built once: which actions the gate takes
as plain tool calls, which tools' results describe the workspace, and which observations have a
state key (so a change to that state can mark them stale). Read by :mod:`harness_lab.loop.run`.
"""

from __future__ import annotations

from ..contract import ControlContract
from ..records.actions import (
    ACTION_MODELS,
    ActionBase,
    Finish,
    ForbiddenAction,
    GatedAction,
    ReadEvidence,
    WriteReport,
)
from ..records.proposal import Proposal

__all__ = ["KEYED", "PLAIN_TOOLS", "WORKSPACE_TOOLS", "state_key"]

# Tools whose results describe the workspace: stale when someone else changes it (sources "step N:<tool>").
WORKSPACE_TOOLS = ("read_file", "list_dir", "write_file", "delete_file", "run_command")


def state_key(proposal: Proposal, contract: ControlContract) -> str | None:
    """The external state an observation came from, so a change to it can mark the item stale."""
    action = proposal.action
    kind = type(action)
    if kind not in KEYED:  # most steps (think, finish, run_command, gated actions): a set lookup
        return None
    if isinstance(action, ReadEvidence):
        return f"evidence:{action.id}"
    if isinstance(action, WriteReport):
        return f"file:{contract.verification.report.path}"
    path = getattr(action, "path", None)
    return f"file:{path}" if isinstance(path, str) else None


# The action models that are neither forbidden nor finish: the gate takes them as tool calls.
_ACTION_TYPES: list[type[ActionBase]] = [*ACTION_MODELS.values(), GatedAction]
PLAIN_TOOLS = frozenset(model for model in _ACTION_TYPES if not issubclass(model, (ForbiddenAction, Finish)))

# The action models whose observation has a state key (pydantic's isinstance runs Python code).
KEYED = frozenset({ReadEvidence, WriteReport, *(model for model in ACTION_MODELS.values() if "path" in model.model_fields)})
