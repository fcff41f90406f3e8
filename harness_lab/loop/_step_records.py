"""The four records every step makes, built from values the run already holds typed.

``StepRecord(...)`` validates each field again (the events tuple against the event union, every
nested record): ~4.3 µs, and ~1.7 µs for each event and the usage. These builders make the same
frozen objects the way ``model_construct`` does, without its generic walk (:func:`~harness_lab.records.flat.built`,
inlined) (~1 µs for a step record, ~0.5 µs for the others). Only the run calls them, with values mypy types; a test checks
each against the validated constructor: equal, same dump, same set fields.
"""

from __future__ import annotations

from ..records.events import Decision, Event, Proposed, StepRecord, ToolCalled, Usage
from ..records.flat import RECORD_SLOTS, shared_fields
from ..records.proposal import Proposal
from ..records.states import RunState
from ..records.tools import ToolResult
from ..validation import Verdict

__all__ = ["proposed", "step_record", "tool_called", "usage"]

# The fields a keyword call names (every field but the defaulted ``kind``): what validation records as set.
_STEP_SET = shared_fields(set(StepRecord.model_fields) - {"kind"})
_USAGE_SET = shared_fields(set(Usage.model_fields) - {"kind"})
_PROPOSED_SET = shared_fields(set(Proposed.model_fields) - {"kind"})
_TOOL_SET = shared_fields(set(ToolCalled.model_fields) - {"kind"})
# Each builder is flat.built inlined (a step makes all four: ~10% fewer instructions): what pydantic's
# own constructor leaves on a model without extras or private attributes, with one read-only fields
# set for all records of the class (see SharedFieldsSet).
_new = object.__new__
_set_dict, _set_fields_set, _set_extra, _set_private = RECORD_SLOTS


def step_record(step: int, before: RunState, after: RunState, proposal: Proposal | None, decision: Decision,
                result: ToolResult | None, verdict: Verdict | None, used: Usage,
                events: tuple[Event, ...]) -> StepRecord:
    record: StepRecord = _new(StepRecord)
    _set_dict(record, {"kind": "step", "step": step, "state_before": before, "state_after": after,
                       "proposal": proposal, "decision": decision, "tool_result": result, "verdict": verdict,
                       "usage": used, "events": events})
    _set_fields_set(record, _STEP_SET)
    _set_extra(record, None)
    _set_private(record, None)
    return record


def usage(decisions: int, tool_calls: int, tokens: int, elapsed_s: float) -> Usage:
    record: Usage = _new(Usage)
    _set_dict(record, {"kind": "usage", "decisions": decisions, "tool_calls": tool_calls, "tokens": tokens,
                       "elapsed_s": float(elapsed_s)})
    _set_fields_set(record, _USAGE_SET)
    _set_extra(record, None)
    _set_private(record, None)
    return record


def proposed(seq: int, step: int, proposal: Proposal, decision: Decision) -> Proposed:
    record: Proposed = _new(Proposed)
    _set_dict(record, {"seq": seq, "step": step, "kind": "proposed", "proposal": proposal, "decision": decision})
    _set_fields_set(record, _PROPOSED_SET)
    _set_extra(record, None)
    _set_private(record, None)
    return record


def tool_called(seq: int, step: int, tool: str, result: ToolResult) -> ToolCalled:
    record: ToolCalled = _new(ToolCalled)
    _set_dict(record, {"seq": seq, "step": step, "kind": "tool_called", "tool": tool, "result": result})
    _set_fields_set(record, _TOOL_SET)
    _set_extra(record, None)
    _set_private(record, None)
    return record
