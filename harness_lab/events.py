"""Trace records: every state change, decision and observation is one frozen event.

Events carry a ``kind`` discriminator; :data:`EVENT_ADAPTER` is the one adapter used at the
store boundary (JSON in, typed records out).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter
from pydantic_core import from_json, to_json

from .actions import Proposal
from .states import RunState
from .tools import ToolResult
from .validation.receipt import Receipt
from .validation.report import ReportVerdict

__all__ = [
    "EVENT_ADAPTER",
    "Decision",
    "Event",
    "HumanDecided",
    "Note",
    "Proposed",
    "Restored",
    "StateChanged",
    "StepRecord",
    "StopReason",
    "ToolCalled",
    "Usage",
    "Validated",
    "dump_step_row",
    "load_step_row",
]


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class StopReason(_Record):
    """Why a run stopped, kept distinct per cause: nothing collapses into ``success: true``."""

    kind: Literal["stop_reason"] = "stop_reason"
    code: str
    message: str


class Usage(_Record):
    kind: Literal["usage"] = "usage"
    decisions: int = 0
    tool_calls: int = 0
    tokens: int = 0
    elapsed_s: float = 0.0


class Decision(_Record):
    """What the harness decided about one proposal."""

    kind: Literal["decision"] = "decision"
    verdict: Literal["execute", "validate", "refuse", "block", "park", "exhaust", "approved", "rejected"]
    reason: str


class _Event(_Record):
    seq: int
    step: int


class StateChanged(_Event):
    kind: Literal["state_changed"] = "state_changed"
    before: RunState
    after: RunState
    reason: str


class Proposed(_Event):
    kind: Literal["proposed"] = "proposed"
    proposal: Proposal
    decision: Decision


class ToolCalled(_Event):
    kind: Literal["tool_called"] = "tool_called"
    tool: str
    result: ToolResult


class Validated(_Event):
    kind: Literal["validated"] = "validated"
    verdict: ReportVerdict | None
    receipt: Receipt | None = None
    enabled: bool = True


class HumanDecided(_Event):
    kind: Literal["human_decided"] = "human_decided"
    approved: bool
    reason: str
    args_sha256: str
    by: str = "human"


class Restored(_Event):
    """State set from a snapshot or checkpoint (rollback, fork, resume): outside the transitions table."""

    kind: Literal["restored"] = "restored"
    source: str
    state: RunState
    detail: str = ""


class Note(_Event):
    """Anything else worth a line in the trace (a claim ignored, a fault injected, a warning)."""

    kind: Literal["note"] = "note"
    topic: str
    message: str
    data: dict[str, Any] = Field(default_factory=dict)


Event = Annotated[
    StateChanged | Proposed | ToolCalled | Validated | HumanDecided | Restored | Note,
    Field(discriminator="kind"),
]
EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)


class StepRecord(_Record):
    """One decision of a run: proposal, decision, tool result, verdicts, state before/after."""

    kind: Literal["step"] = "step"
    step: int
    state_before: RunState
    state_after: RunState
    proposal: Proposal | None
    decision: Decision
    tool_result: ToolResult | None = None
    verdict: ReportVerdict | None = None
    usage: Usage
    events: tuple[Event, ...] = ()

    def summary(self) -> str:
        what = self.proposal.describe() if self.proposal else "(no proposal)"
        tail = f" -> {self.tool_result.status}" if self.tool_result else ""
        if self.verdict is not None:
            tail += " accepted" if self.verdict.accepted else f" rejected ({len(self.verdict.errors)} errors)"
        return (
            f"step {self.step}: {what}{tail} | {self.decision.verdict}: {self.decision.reason} | "
            f"{self.state_before.value} -> {self.state_after.value}"
        )


def dump_step_row(record: StepRecord) -> str:
    """The record as a store keeps it: JSON in which an event that repeats the record's own proposal
    and decision (``proposed``) or tool result (``tool_called``) says ``"same": true`` instead of
    carrying them again (a third of the bytes of a no-op step's row). :func:`load_step_row` reads it."""
    data = record.model_dump(mode="json", exclude={"events"})
    events: list[dict[str, Any]] = []
    for event in record.events:
        if type(event) is Proposed and event.proposal is record.proposal and event.decision is record.decision:
            events.append({"seq": event.seq, "step": event.step, "kind": "proposed", "same": True})
        elif type(event) is ToolCalled and event.result is record.tool_result:
            events.append({"seq": event.seq, "step": event.step, "kind": "tool_called", "tool": event.tool,
                           "same": True})
        else:
            events.append(event.model_dump(mode="json"))
    data["events"] = events
    return to_json(data).decode()


def load_step_row(text: str) -> StepRecord:
    """A stored record back (:func:`dump_step_row`'s form, or the plain ``model_dump_json`` one)."""
    data = from_json(text)
    for event in data.get("events", ()) if isinstance(data, dict) else ():
        if isinstance(event, dict) and event.pop("same", False):
            if event.get("kind") == "proposed":
                event["proposal"], event["decision"] = data.get("proposal"), data.get("decision")
            elif event.get("kind") == "tool_called":
                event["result"] = data.get("tool_result")
    return StepRecord.model_validate(data)
