"""Trace records: every state change, decision and observation is one frozen event.

Events carry a ``kind`` discriminator; :data:`EVENT_ADAPTER` is the one adapter used at the
store boundary (JSON in, typed records out).
"""

from __future__ import annotations

from json.encoder import encode_basestring as _encode
from math import isfinite
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter
from pydantic_core import from_json, to_json

from .actions import _FLAT, _MODELS
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
    dumped once (see :class:`_Pieces`). Fields are read from the records' ``__dict__`` (what
    validation stored): a store writes one row per step."""
    d = record.__dict__
    step, proposal, decision, result = d["step"], d["proposal"], d["decision"], d["tool_result"]
    pieces, before, after = _PIECES, d["state_before"], d["state_after"]
    states = _STATE_JSON[before] if after is before else f'{_STATE_JSON[before]},"state_after":{_STATE_JSON[after]}'
    said = "null" if proposal is None else _proposal_json(proposal)
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
                      f'"kind":"tool_called","tool":{_name_json(f["tool"])},"same":true}}')
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
            texts.append(f'{{"seq":{e["seq"]}{at},"kind":"tool_called","tool":{_name_json(e["tool"])},"same":true}}')
        else:
            texts.append(_event_json(event, at))
    return ",".join(texts)


def _event_json(event: Event, at: str) -> str:
    """An event carried in full (``at``: its ``step`` when it differs from the record's)."""
    data = event.model_dump(mode="json")
    if type(event) is Proposed:
        data["proposal"] = from_json(_proposal_json(event.proposal))
    if not at:
        del data["step"]
    return to_json(data).decode()


def _name_json(name: str) -> str:
    # a tool's name: JSON spells an identifier as it is
    return f'"{name}"' if name.isidentifier() else to_json(name).decode()


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
    p = proposal.__dict__
    raw, action = p["raw"], p["action"]
    # The usual proposal: a flat action (plain str fields, see _flat) parsed from a raw dict that holds
    # exactly its fields, in field order, and nothing else. Both texts are then the raw's, spelled from
    # a template: no action dump and no second text to compare (_full_proposal_json's outcome).
    if type(raw) is dict and (row := _FLAT_ROWS.get(type(action))) is not None and not p["claims"]:
        names, head, fields = row
        if raw == action.__dict__ and [*raw] == names:  # (a proposal with an action has no error)
            text = head
            for before, name in fields:
                value = raw[name]
                if type(value) is not str or not value.isascii():  # pydantic's own text for the others
                    return _full_proposal_json(proposal)
                text = f"{text}{before}{_encode(value)}"  # json's escapes of an ASCII str are serde's: same text
            return f'{text}}},"action":"raw"}}'
    return _full_proposal_json(proposal)


def _flat_rows() -> dict[type[BaseModel], tuple[list[str], str, tuple[tuple[str, str], ...]]]:
    """Per flat action class whose ``kind`` comes first: its field names, the row text up to its first
    str value and, per value, the text before it."""
    rows: dict[type[BaseModel], tuple[list[str], str, tuple[tuple[str, str], ...]]] = {}
    for kind, spec in _FLAT.items():
        names = list(_MODELS[kind].model_fields)
        if names[0] == "kind" and all(name.isidentifier() for name in names):
            fields = tuple((f',"{name}":', name) for name, _, _ in spec)
            rows[_MODELS[kind]] = (names, f'{{"raw":{{"kind":{_encode(kind)}', fields)
    return rows


def _full_proposal_json(proposal: Proposal) -> str:
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
    u = usage.__dict__
    elapsed = u["elapsed_s"]
    if not isfinite(elapsed):  # no JSON number spells these
        return to_json(usage.model_dump(mode="json", exclude={"kind"})).decode()
    return (f'{{"decisions":{u["decisions"]},"tool_calls":{u["tool_calls"]},"tokens":{u["tokens"]},'
            f'"elapsed_s":{to_json(elapsed).decode()}}}')  # (the shortest text that reads back the same)


class _Pieces:
    """The JSON of shared frozen records, by object identity: a run reuses one decision object per
    verdict and one result for every ``think``, so most steps dump none of them. Safe because the
    records are frozen and each entry holds its object (its id cannot be reused while cached)."""

    _MAX = 64  # a few shared records per run; new ones (a read's result) churn through

    def __init__(self) -> None:
        self._texts: dict[int, tuple[BaseModel, str]] = {}
        self._usage: tuple[Usage | None, str] = (None, "")
        self._outcomes: dict[tuple[int, int], tuple[Decision, ToolResult | None, str]] = {}
        self.last: tuple[Decision | None, ToolResult | None, str] = (None, None, "")  # the latest outcome

    def usage(self, usage: Usage) -> str:
        """``_usage_json(usage)``; a run's usage record is new only when a step spent something, and
        its step record and checkpoint both write it."""
        if self._usage[0] is not usage:
            self._usage = (usage, _usage_json(usage))
        return self._usage[1]

    def outcome(self, decision: Decision, result: ToolResult | None) -> str:
        """The row's ``,"decision":...`` and ``,"tool_result":...`` (when there is one): a step of a run
        pairs one of its few decision objects with one of its few results, so a pair is usually met before."""
        key = (id(decision), id(result))
        hit = self._outcomes.get(key)
        if hit is not None and hit[0] is decision and hit[1] is result:
            self.last = hit
            return hit[2]
        text = f',"decision":{self.text(decision)}'
        if result is not None:
            text += f',"tool_result":{self.text(result)}'
        if len(self._outcomes) >= self._MAX:
            self._outcomes.clear()
        self._outcomes[key] = self.last = (decision, result, text)
        return text

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
_FLAT_ROWS = _flat_rows()
_STATE_JSON = {state: to_json(state.value).decode() for state in RunState}  # Enum.value is a slow descriptor
