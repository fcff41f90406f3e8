"""Structured edits of a proposed call: replace arguments by field, keeping the tool.

``run.edit_pending(text="...")`` and ``run.approve(edited={...})`` both go through
:func:`edited_proposal`: the text of a report is given as text, not as escaped JSON. An edit the tool
cannot take (an unknown field, a wrong type, another tool) is refused with one line naming the field,
before anything changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .actions import _FIELDS, GatedAction
from .errors import RunStateError
from .proposal import Proposal, parse_proposal

__all__ = ["edited_proposal", "editable_fields"]


def editable_fields(proposal: Proposal) -> dict[str, Any]:
    """The call's arguments as a flat mapping (without ``kind``): what an edit replaces field by field.
    A gated external call (push, release...) keeps its arguments in ``args``; they are shown flat, as
    they were proposed."""
    action = proposal.action
    if isinstance(action, GatedAction):
        return dict(action.args)
    if action is not None:
        return {k: v for k, v in (proposal.action_json or {}).items() if k != "kind"}
    raw = proposal.raw  # a call refused for its arguments: fix it by field, the tool named as proposed
    return {k: v for k, v in raw.items() if k != "kind"} if isinstance(raw, dict) else {}


def edited_proposal(proposal: Proposal, changes: Mapping[str, object], *, what: str = "edit") -> Proposal:
    """``proposal`` with the fields in ``changes`` replaced; the result is a valid call of the same tool,
    or a one-line :class:`RunStateError` naming the field (``what`` names the edit in it)."""
    kind = _kind(proposal)
    if kind is None:
        raise RunStateError(f"{what}: the pending proposal names no tool ({_why(proposal)}); give a whole "
                            "proposal instead")
    current = editable_fields(proposal)
    for name, value in changes.items():
        if name == "kind":
            if value != kind:  # an edit changes arguments; another tool is another proposal
                raise RunStateError(f"{what}: kind: the tool stays {kind!r}, got {value!r}")
            continue
        if name not in current and name not in (fields := _fields_of(kind)):
            known = ", ".join(sorted(set(current) | fields)) or "no arguments"
            raise RunStateError(f"{what}: unknown field {name!r} for {kind} (it takes: {known})")
    merged = {"kind": kind, **current, **{k: v for k, v in changes.items() if k != "kind"}}
    edited = parse_proposal(merged)
    if edited.action is None:
        raise RunStateError(f"{what}: {_why(edited)}; the pending call is unchanged")
    if edited.claims:  # a field the model does not define: parse_proposal keeps it as a claim, an edit refuses it
        raise RunStateError(f"{what}: unknown field {next(iter(edited.claims))!r} for {kind}")
    return edited


def _kind(proposal: Proposal) -> str | None:
    action = proposal.action
    if action is not None:
        return None if action.kind == "forbidden" else action.kind
    raw = proposal.raw
    kind = raw.get("kind") if isinstance(raw, dict) else None
    return kind if isinstance(kind, str) and proposal.error is not None and proposal.error.code == "bad_arguments" else None


def _fields_of(kind: str) -> frozenset[str]:
    """The fields the tool's model defines (one left at its default may be set by an edit); a gated
    external call's arguments are free-form: only those it was proposed with can be replaced."""
    return _FIELDS.get(kind, frozenset()) - {"kind"}


def _why(proposal: Proposal) -> str:
    return proposal.error.message if proposal.error is not None else "not a tool call"
