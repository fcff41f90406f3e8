"""Structured edits of a proposed call: replace arguments by field, keeping the tool.

``run.edit_pending(text="...")`` and ``run.approve(edited={...})`` both go through
:func:`edited_proposal`: the text of a report is given as text, not as escaped JSON. An edit the tool
cannot take (an unknown field, a wrong type, another tool) is refused with one line naming the field,
before anything changes.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import RunStateError
from ..records.actions import ACTION_FIELDS, GatedAction
from ..records.proposal import Proposal, parse_proposal

__all__ = ["edited_proposal"]


def edited_proposal(proposal: Proposal, changes: Mapping[str, object], *, what: str = "edit") -> Proposal:
    """``proposal`` with the fields in ``changes`` replaced; the result is a valid call of the same tool,
    or a one-line :class:`RunStateError` naming the field (``what`` names the edit in it)."""
    kind = _kind(proposal)
    if kind is None:
        raise RunStateError(f"{what}: the pending proposal names no tool ({_why(proposal)}); give a whole "
                            "proposal instead")
    current = proposal.arguments
    nested = changes.get("args")
    if isinstance(proposal.action, GatedAction) and isinstance(nested, Mapping) and "args" not in current:
        # the request's own shape (ApprovalRequest.args: {"kind": ..., "args": {...}}): its fields, replaced one by one
        changes = {**{k: v for k, v in changes.items() if k != "args"}, **nested}
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
    return ACTION_FIELDS.get(kind, frozenset()) - {"kind"}


def _why(proposal: Proposal) -> str:
    return proposal.error.message if proposal.error is not None else "not a tool call"
