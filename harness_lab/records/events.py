"""Trace records: every state change, decision and observation is one frozen event.

Events carry a ``kind`` discriminator; :data:`EVENT_ADAPTER` is the one adapter used at the
store boundary (JSON in, typed records out).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter
from pydantic_core import from_json

from .proposal import Proposal
from .receipt import Receipt
from .states import RunState
from .tools import ToolResult
from .verdicts import Verdict

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
    # "unavailable": the endpoint behind the proposer failed; nothing was proposed, nothing decided or charged
    verdict: Literal["execute", "validate", "refuse", "block", "park", "exhaust", "approved", "rejected",
                     "unavailable"]
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
    verdict: Verdict | None
    receipt: Receipt | None = None
    enabled: bool = True


class HumanDecided(_Event):
    kind: Literal["human_decided"] = "human_decided"
    approved: bool
    reason: str
    args_sha256: str
    by: str = "human"
    # Approved with changes: what executed is the edited call (its sha256 here, the step record's proposal),
    # ``args_sha256`` stays the one the request showed and ``original_args`` keeps what was asked.
    edited: bool = False
    edited_args_sha256: str | None = None
    original_args: dict[str, Any] | None = None


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
    verdict: Verdict | None = None
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


def load_step_row(text: str) -> StepRecord:
    """A stored record back: :func:`harness_lab.persistence.row_text.dump_step_row`'s form, its older forms (events that say ``same``
    but carry their step, records in full), or the plain ``model_dump_json`` one."""
    data = from_json(text)
    if isinstance(data, dict):
        if "state_after" not in data and "state_before" in data:
            data["state_after"] = data["state_before"]
        _expand_proposal(data.get("proposal"))
        for event in data.get("events", ()):
            if not isinstance(event, dict):
                continue
            if "step" not in event and "step" in data:
                event["step"] = data["step"]
            if event.pop("same", False):
                if event.get("kind") == "proposed":
                    event["proposal"], event["decision"] = data.get("proposal"), data.get("decision")
                elif event.get("kind") == "tool_called":
                    event["result"] = data.get("tool_result")
            elif event.get("kind") == "proposed":
                _expand_proposal(event.get("proposal"))
    return StepRecord.model_validate(data)


def _expand_proposal(data: object) -> None:
    if isinstance(data, dict) and data.get("action") == "raw":  # an action is an object, never a string
        data["action"] = data.get("raw")
