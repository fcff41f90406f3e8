"""How a step row is spelled: :func:`dump_step_row` (read that first), and the JSON text of proposals, usage
and the records a run shares between steps, built from templates and caches so a store can write one row
per step cheaply. The row is made here, on the persistence side, from the record (``records/`` knows no
row text); :func:`~harness_lab.records.events.load_step_row` reads it back.

Why by hand and not by orjson (the checkpoint's serializer, ``store/fold.py``): a loop's row spelled from
these templates costs 4.0-4.6 µs CPU; the same row as plain data through ``orjson.dumps`` cost 3.9-4.0 µs
before any of the checks the templates make (a proposal whose action differs from its raw form, events that
do not repeat the record, strings orjson refuses such as a lone surrogate): no faster once they are in.
"""

from __future__ import annotations

from json.encoder import encode_basestring as _encode
from math import isfinite

from pydantic import BaseModel
from pydantic_core import from_json, to_json

from ..records.actions import ACTION_MODELS, FLAT_SPECS
from ..records.events import Decision, Event, HumanDecided, Proposed, StepRecord, ToolCalled
from ..records.proposal import Proposal
from ..records.states import RunState
from ..records.tools import ToolResult

__all__ = ["dump_step_row"]

# Usage and Decision are typed as BaseModel in _Pieces: it only reads their fields and compares them by identity.


def name_json(name: str) -> str:
    # a tool's name: JSON spells an identifier as it is
    return f'"{name}"' if name.isidentifier() else to_json(name).decode()


def proposal_json(proposal: Proposal) -> str:
    p = proposal.__dict__
    raw, action = p["raw"], p["action"]
    # The usual proposal: a flat action (plain str fields, see flat) parsed from a raw dict that holds
    # exactly its fields, in field order, and nothing else. Both texts are then the raw's, spelled from
    # a template: no action dump and no second text to compare (full_proposal_json's outcome).
    if type(raw) is dict and (row := FLAT_ROWS.get(type(action))) is not None and not p["claims"]:
        names, head, fields = row
        if raw == action.__dict__ and [*raw] == names:  # (a proposal with an action has no error)
            text = head
            for before, name in fields:
                value = raw[name]
                if type(value) is not str or not value.isascii():  # pydantic's own text for the others
                    return full_proposal_json(proposal)
                text = f"{text}{before}{_encode(value)}"  # json's escapes of an ASCII str are serde's: same text
            return f'{text}}},"action":"raw"}}'
    return full_proposal_json(proposal)


def _flat_rows() -> dict[type[BaseModel], tuple[list[str], str, tuple[tuple[str, str], ...]]]:
    """Per flat action class whose ``kind`` comes first: its field names, the row text up to its first
    str value and, per value, the text before it."""
    rows: dict[type[BaseModel], tuple[list[str], str, tuple[tuple[str, str], ...]]] = {}
    for kind, spec in FLAT_SPECS.items():
        names = list(ACTION_MODELS[kind].model_fields)
        if names[0] == "kind" and all(name.isidentifier() for name in names):
            fields = tuple((f',"{name}":', name) for name, _, _ in spec)
            rows[ACTION_MODELS[kind]] = (names, f'{{"raw":{{"kind":{_encode(kind)}', fields)
    return rows


def full_proposal_json(proposal: Proposal) -> str:
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


def _usage_json(usage: BaseModel) -> str:
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
        self._usage: tuple[BaseModel | None, str] = (None, "")
        self._outcomes: dict[tuple[int, int], tuple[BaseModel, ToolResult | None, str]] = {}
        self.last: tuple[BaseModel | None, ToolResult | None, str] = (None, None, "")  # the latest outcome

    def usage(self, usage: BaseModel) -> str:
        """``_usage_json(usage)``; a run's usage record is new only when a step spent something, and
        its step record and checkpoint both write it."""
        if self._usage[0] is not usage:
            self._usage = (usage, _usage_json(usage))
        return self._usage[1]

    def outcome(self, decision: BaseModel, result: ToolResult | None) -> str:
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


PIECES = _Pieces()
FLAT_ROWS = _flat_rows()
STATE_JSON = {state: to_json(state.value).decode() for state in RunState}  # Enum.value is a slow descriptor


def dump_step_row(record: StepRecord) -> str:
    """The record as a store keeps it: compact JSON that :func:`~harness_lab.records.events.load_step_row` reads back to an equal
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
