"""Trace records: every state change, decision and observation is one frozen event.

Events carry a ``kind`` discriminator; :data:`EVENT_ADAPTER` is the one adapter used at the
store boundary (JSON in, typed records out).
"""

from __future__ import annotations

from math import isfinite
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter
from pydantic_core import from_json, to_json

from .proposal import Proposal
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
    """The record as a store keeps it: compact JSON that :func:`load_step_row` reads back to an equal
    record. An event that repeats the record's own proposal and decision (``proposed``) or tool result
    (``tool_called``) says ``"same": true`` instead of carrying them again; an event of the record's
    step leaves its ``step`` out; ``state_after`` is left out when it equals ``state_before``; the
    proposal, decision, tool result and usage leave out the fields at their defaults (``kind`` too:
    their fields are not unions); a proposal whose action is spelled exactly like its raw form says
    ``"action": "raw"``. Shared frozen records (a run's decisions, the result of ``think``) are
    dumped once (see :class:`_Pieces`)."""
    step, pieces = record.step, _PIECES
    before, after = record.state_before, record.state_after
    out = [f'{{"kind":"step","step":{step},"state_before":{_STATE_JSON[before]}']
    if after is not before:
        out.append(f',"state_after":{_STATE_JSON[after]}')
    proposal = record.proposal
    out.append(',"proposal":null' if proposal is None else f',"proposal":{_proposal_json(proposal)}')
    out.append(f',"decision":{pieces.text(record.decision)}')
    if record.tool_result is not None:
        out.append(f',"tool_result":{pieces.text(record.tool_result)}')
    if record.verdict is not None:
        out.append(f',"verdict":{pieces.text(record.verdict, full=True)}')
    out.append(f',"usage":{pieces.usage(record.usage)},"events":[')
    first = True
    for event in record.events:
        at = "" if event.step == step else f',"step":{event.step}'
        if type(event) is Proposed and event.proposal is record.proposal and event.decision is record.decision:
            text = f'{{"seq":{event.seq}{at},"kind":"proposed","same":true}}'
        elif type(event) is ToolCalled and event.result is record.tool_result:
            tool = event.tool  # a name: JSON spells an identifier as it is
            tool = f'"{tool}"' if tool.isidentifier() else to_json(tool).decode()
            text = f'{{"seq":{event.seq}{at},"kind":"tool_called","tool":{tool},"same":true}}'
        else:
            data = event.model_dump(mode="json")
            if type(event) is Proposed:
                data["proposal"] = from_json(_proposal_json(event.proposal))
            if not at:
                del data["step"]
            text = to_json(data).decode()
        out.append(text if first else "," + text)
        first = False
    out.append("]}")
    return "".join(out)


def load_step_row(text: str) -> StepRecord:
    """A stored record back: :func:`dump_step_row`'s form, its older forms (events that say ``same``
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


def _proposal_json(proposal: Proposal) -> str:
    raw = to_json(proposal.raw).decode()
    out = [f'{{"raw":{raw}']
    if proposal.action is not None:
        action = proposal.action_json
        # The same text reads back to the same action; equal dicts alone could differ (1 == 1.0).
        text = to_json(action).decode()
        out.append(',"action":"raw"' if action == proposal.raw and text == raw else f',"action":{text}')
    if proposal.error is not None:
        out.append(f',"error":{to_json(proposal.error.model_dump(mode="json")).decode()}')
    if proposal.claims:
        out.append(f',"claims":{to_json(proposal.claims).decode()}')
    out.append("}")
    return "".join(out)


def _usage_json(usage: Usage) -> str:
    elapsed = usage.elapsed_s
    if not isfinite(elapsed):  # no JSON number spells these
        return to_json(usage.model_dump(mode="json", exclude={"kind"})).decode()
    return (f'{{"decisions":{usage.decisions},"tool_calls":{usage.tool_calls},"tokens":{usage.tokens},'
            f'"elapsed_s":{to_json(elapsed).decode()}}}')  # (the shortest text that reads back the same)


class _Pieces:
    """The JSON of shared frozen records, by object identity: a run reuses one decision object per
    verdict and one result for every ``think``, so most steps dump none of them. Safe because the
    records are frozen and each entry holds its object (its id cannot be reused while cached)."""

    _MAX = 64  # a few shared records per run; new ones (a read's result) churn through

    def __init__(self) -> None:
        self._texts: dict[int, tuple[BaseModel, str]] = {}
        self._usage: tuple[Usage | None, str] = (None, "")

    def usage(self, usage: Usage) -> str:
        """``_usage_json(usage)``; a run's usage record is new only when a step spent something, and
        its step record and checkpoint both write it."""
        if self._usage[0] is not usage:
            self._usage = (usage, _usage_json(usage))
        return self._usage[1]

    def text(self, record: BaseModel, *, full: bool = False) -> str:
        hit = self._texts.get(id(record))
        if hit is not None and hit[0] is record:
            return hit[1]
        data = record.model_dump(mode="json")
        if not full:  # leave out the fields at their default (read back the same)
            for name, field in type(record).model_fields.items():
                if name in data and not field.is_required():
                    default = field.get_default(call_default_factory=True)
                    if data[name] == default and type(data[name]) is type(default):
                        del data[name]
        text = to_json(data).decode()
        if len(self._texts) >= self._MAX:
            self._texts.clear()
        self._texts[id(record)] = (record, text)
        return text


_PIECES = _Pieces()
_STATE_JSON = {state: to_json(state.value).decode() for state in RunState}  # Enum.value is a slow descriptor
