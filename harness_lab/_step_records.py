"""The four records every step makes, built from values the run already holds typed.

``StepRecord(...)`` validates each field again (the events tuple against the event union, every
nested record): ~4.3 µs, and ~1.7 µs for each event and the usage. These builders make the same
frozen objects the way ``model_construct`` does, without its generic walk (:func:`~harness_lab._flat.built`) (~1.1 µs for a step
record, ~0.5 µs for the others). Only the run calls them, with values mypy types; a test checks
each against the validated constructor: equal, same dump, same set fields.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel

from ._flat import SharedFieldsSet, built, shared_fields
from .events import Decision, Event, Proposed, StepRecord, ToolCalled, Usage
from .proposal import Proposal
from .states import RunState
from .tools import ToolResult
from .validation import ReportVerdict

__all__ = ["proposed", "step_record", "tool_called", "usage"]

_R = TypeVar("_R", bound=BaseModel)


def _finish(cls: type[_R], data: dict[str, Any], fields_set: SharedFieldsSet) -> _R:
    # What pydantic's own constructor leaves on a model without extras or private attributes, with
    # one read-only fields set for all records of the class (see SharedFieldsSet).
    return built(cls, data, fields_set)


# The fields a keyword call names (every field but the defaulted ``kind``): what validation records as set.
_STEP_SET = shared_fields(set(StepRecord.model_fields) - {"kind"})
_USAGE_SET = shared_fields(set(Usage.model_fields) - {"kind"})
_PROPOSED_SET = shared_fields(set(Proposed.model_fields) - {"kind"})
_TOOL_SET = shared_fields(set(ToolCalled.model_fields) - {"kind"})


def step_record(step: int, before: RunState, after: RunState, proposal: Proposal | None, decision: Decision,
                result: ToolResult | None, verdict: ReportVerdict | None, used: Usage,
                events: tuple[Event, ...]) -> StepRecord:
    data = {"kind": "step", "step": step, "state_before": before, "state_after": after, "proposal": proposal,
            "decision": decision, "tool_result": result, "verdict": verdict, "usage": used, "events": events}
    return _finish(StepRecord, data, _STEP_SET)


def usage(decisions: int, tool_calls: int, tokens: int, elapsed_s: float) -> Usage:
    data = {"kind": "usage", "decisions": decisions, "tool_calls": tool_calls, "tokens": tokens,
            "elapsed_s": float(elapsed_s)}
    return _finish(Usage, data, _USAGE_SET)


def proposed(seq: int, step: int, proposal: Proposal, decision: Decision) -> Proposed:
    data = {"seq": seq, "step": step, "kind": "proposed", "proposal": proposal, "decision": decision}
    return _finish(Proposed, data, _PROPOSED_SET)


def tool_called(seq: int, step: int, tool: str, result: ToolResult) -> ToolCalled:
    data = {"seq": seq, "step": step, "kind": "tool_called", "tool": tool, "result": result}
    return _finish(ToolCalled, data, _TOOL_SET)
