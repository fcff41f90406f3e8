"""Trace records: every state change, decision and observation is one frozen event.

Events carry a ``kind`` discriminator; :data:`EVENT_ADAPTER` is the one adapter used at the
store boundary (JSON in, typed records out).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter
from pydantic_core import from_json, to_json

# The text pieces of a step row; the names others read (checkpoint rows, tests) are re-exported.
from ..row_text import FLAT_ROWS as FLAT_ROWS
from ..row_text import PIECES as PIECES
from ..row_text import STATE_JSON, name_json, proposal_json
from ..row_text import full_proposal_json as full_proposal_json
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


def dump_step_row(record: StepRecord) -> str:
    """The record as a store keeps it: compact JSON that :func:`load_step_row` reads back to an equal
    record. An event that repeats the record's own proposal and decision (``proposed``) or tool result
    (``tool_called``) says ``"same": true`` instead of carrying them again; an event of the record's
    step leaves its ``step`` out; ``state_after`` is left out when it equals ``state_before``; the
    proposal, decision, tool result and usage leave out the fields at their defaults (``kind`` too:
    their fields are not unions); a proposal whose action is spelled exactly like its raw form says
    ``"action": "raw"``. Shared frozen records (a run's decisions, the result of ``think``) are
    dumped once (see :class:`_Pieces`). Fields are read from the records' ``__dict__`` (what
    validation stored): a store writes one row per step."""
    d = record.__dict__
    step, proposal, decision, result = d["step"], d["proposal"], d["decision"], d["tool_result"]
    pieces, before, after = PIECES, d["state_before"], d["state_after"]
    states = STATE_JSON[before] if after is before else f'{STATE_JSON[before]},"state_after":{STATE_JSON[after]}'
    said = "null" if proposal is None else proposal_json(proposal)
    last = pieces.last  # most steps pair the decision and result of the step before
    outcome = last[2] if last[0] is decision and last[1] is result else pieces.outcome(decision, result)
    verdict = d["verdict"]
    checked = "" if verdict is None else f',"verdict":{pieces.text(verdict, full=True)}'
    events = d["events"]
    if len(events) == 2 and type(first := events[0]) is Proposed and type(then := events[1]) is ToolCalled:
        e, f = first.__dict__, then.__dict__  # the usual step: its proposal, then its tool's result
        if (e["proposal"] is proposal and e["decision"] is decision and f["result"] is result
                and e["step"] == step == f["step"]):
            listed = (f'{{"seq":{e["seq"]},"kind":"proposed","same":true}},{{"seq":{f["seq"]},'
                      f'"kind":"tool_called","tool":{name_json(f["tool"])},"same":true}}')
        else:
            listed = _events_json(events, step, proposal, decision, result)
    else:
        listed = _events_json(events, step, proposal, decision, result)
    return (f'{{"kind":"step","step":{step},"state_before":{states},"proposal":{said}'
            f'{outcome}{checked},"usage":{pieces.usage(d["usage"])},"events":[{listed}]}}')


def _events_json(events: tuple[Event, ...], step: int, proposal: Proposal | None, decision: Decision,
                 result: ToolResult | None) -> str:
    texts = []
    for event in events:
        e, kind = event.__dict__, type(event)
        at = "" if e["step"] == step else f',"step":{e["step"]}'
        if kind is Proposed and e["proposal"] is proposal and e["decision"] is decision:
            texts.append(f'{{"seq":{e["seq"]}{at},"kind":"proposed","same":true}}')
        elif kind is ToolCalled and e["result"] is result:
            texts.append(f'{{"seq":{e["seq"]}{at},"kind":"tool_called","tool":{name_json(e["tool"])},"same":true}}')
        else:
            texts.append(_event_json(event, at))
    return ",".join(texts)


_EDIT_FIELDS = ("edited", "edited_args_sha256", "original_args")


def _event_json(event: Event, at: str) -> str:
    """An event carried in full (``at``: its ``step`` when it differs from the record's)."""
    data = event.model_dump(mode="json")
    if type(event) is HumanDecided and not event.edited:  # rows of plain decisions read as before
        for name in _EDIT_FIELDS:
            del data[name]
    if type(event) is Proposed:
        data["proposal"] = from_json(proposal_json(event.proposal))
    if not at:
        del data["step"]
    return to_json(data).decode()


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
