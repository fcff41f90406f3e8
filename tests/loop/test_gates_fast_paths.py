"""The flat-action shortcuts (harness_lab/records/flat.py) give exactly what pydantic and ``json`` give: the
parsed proposal (stored state, fields set, errors), its canonical JSON (the gates' fingerprint, stored
in checkpoints as ``recent``), its JSON form and its description; and the convergence gate's cached
similarity verdicts are the computed ones."""

from __future__ import annotations

import json
from contextlib import contextmanager
from typing import Any, Literal
from unittest import mock

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, Field, field_validator

from harness_lab.clock import FakeClock
from harness_lab.contract import Budget
from harness_lab.loop.gates import LoopGates, _similar, text_similarity
from harness_lab.records import actions, flat
from harness_lab.records import proposal as proposal_module
from harness_lab.records.proposal import Proposal, parse_proposal


class _Str(str):
    """A str subclass: pydantic turns it into a plain str, so the shortcut must leave it to pydantic."""


@contextmanager
def _slow_paths() -> Any:
    with mock.patch.dict(actions.FLAT_SPECS, clear=True), mock.patch.dict(actions._FLAT_JSON, clear=True):
        yield


_FLAT_KINDS = ["read_evidence", "write_report", "finish", "list_dir", "read_file", "write_file", "delete_file", "think",
               "begin_subtask", "finish_subtask"]
_NAMES = ["kind", "id", "text", "path", "content", "thought", "argv", "verified", "reason", "name", "goal", "conclusion"]
_text = st.one_of(
    st.text(max_size=6),
    st.text(alphabet=st.characters(codec="ascii"), max_size=6),
    st.text(alphabet=st.characters(categories=["Cs", "Ll", "Cc"]), max_size=3),  # lone surrogates, controls
)
_value = st.one_of(
    _text, _text.map(_Str), st.none(), st.integers(), st.booleans(), st.floats(), st.binary(max_size=3),
    st.lists(_text, max_size=2), st.dictionaries(_text, _text, max_size=2),
)
_key = st.one_of(st.sampled_from(_NAMES), st.sampled_from(_NAMES).map(_Str), _text, st.integers(0, 2))
_kind = st.one_of(st.sampled_from(_FLAT_KINDS), st.sampled_from(_FLAT_KINDS).map(_Str),
                  st.sampled_from(["run_command", "read_ref", "push", "set_state", "nope"]))
_raw = st.builds(lambda kind, rest: {"kind": kind, **{k: v for k, v in rest.items() if k != "kind"}},
                 _kind, st.dictionaries(_key, _value, max_size=4))
# mostly well-formed flat proposals, so the shortcut is taken as often as it is refused
_good = st.builds(
    lambda kind, values, extra: {"kind": kind, **{n: values.get(n, "x") for n in actions.ACTION_FIELDS[kind] - {"kind"}},
                                 **extra},
    st.sampled_from(_FLAT_KINDS), st.dictionaries(st.sampled_from(_NAMES[1:6]), _text, max_size=3),
    st.dictionaries(st.sampled_from(["verified", "reason"]), _value, max_size=1),
)


def _outcome(raw: object) -> Any:
    try:
        return parse_proposal(raw)
    except Exception as exc:  # noqa: BLE001 - the shortcut must raise (or not) exactly as pydantic does
        return type(exc)


def _state(model: Any) -> Any:
    """Everything a pydantic model holds, with the types of its values (nested models spelled too)."""
    if not hasattr(model, "__pydantic_fields_set__"):
        return (type(model), json.dumps(model, default=repr) if not isinstance(model, type) else model)
    fields = [(k, _state(v)) for k, v in model.__dict__.items()]
    return (type(model), fields, sorted(model.__pydantic_fields_set__), model.__pydantic_extra__,
            model.__pydantic_private__)


def _forms(proposal: Proposal) -> Any:
    try:
        as_json = proposal.action_json
        return (proposal.canonical, proposal.describe(), json.dumps(as_json),
                [type(v) for v in as_json.values()] if as_json else None)
    except Exception as exc:  # noqa: BLE001 - pydantic cannot dump a lone surrogate in a gated action's args
        return type(exc)


@settings(max_examples=600, deadline=None)
@given(st.one_of(_raw, _good))
def test_a_flat_proposal_parses_to_what_pydantic_makes(raw: dict[Any, Any]) -> None:
    _parses_as_pydantic(raw)


@settings(max_examples=300, deadline=None)
@given(st.one_of(_raw, _good))
def test_words_said_again_parse_to_what_pydantic_makes(raw: dict[Any, Any]) -> None:
    """A raw parsed before (kept by its words) parses again as pydantic would, and so does one with equal
    words of other types (str subclasses)."""
    _outcome(raw)
    _parses_as_pydantic(dict(raw))
    _parses_as_pydantic({_Str(k) if type(k) is str else k: _Str(v) if type(v) is str else v for k, v in raw.items()})
    _parses_as_pydantic({k: _Str(v) if type(v) is str and k != "kind" else v for k, v in raw.items()})


def test_a_call_said_again_is_not_parsed_again() -> None:
    raw = {"kind": "think", "thought": "said again"}
    first = parse_proposal(dict(raw))
    with mock.patch.object(proposal_module, "_parse_flat", wraps=proposal_module._parse_flat) as parsed:
        again = parse_proposal(dict(raw))
        assert parsed.call_count == 0
        assert _state(again) == _state(first) and again.action is first.action and again.raw is not first.raw
        others = ({"thought": "said again", "kind": "think"}, {"kind": "think", "thought": _Str("said again")})
        for other in others:  # keys in another order, a str subclass: parsed
            assert parse_proposal(other).raw == raw
        assert {id(call.args[0]) for call in parsed.call_args_list} == {id(other) for other in others}


def _parses_as_pydantic(raw: dict[Any, Any]) -> None:
    fast = _outcome(raw)
    with _slow_paths():
        slow = _outcome(raw)
    if isinstance(slow, type):
        assert fast is slow
        return
    assert isinstance(fast, Proposal)
    assert _state(fast) == _state(slow)
    assert fast == slow
    assert fast.raw is not raw and slow.raw is not raw  # a copy: the proposer may reuse its dict
    if isinstance(fast.raw, dict):  # the copy's keys and values of the same types (JSON's: no str subclass)
        assert [(type(k), type(v)) for k, v in fast.raw.items()] == [(type(k), type(v)) for k, v in slow.raw.items()]
    fast_forms = _forms(fast)
    with _slow_paths():
        slow_forms = _forms(slow)
    assert fast_forms == slow_forms
    if fast.action is not None and not isinstance(fast_forms, type):  # the fingerprint is the sorted-key JSON of the dumped action
        assert fast.canonical == json.dumps(fast.action.model_dump(mode="json"), sort_keys=True, default=str)


def test_the_shortcut_covers_the_string_only_kinds() -> None:
    # so the equality above is about the shortcut: these kinds take it when well formed
    assert sorted(actions.FLAT_SPECS) == sorted(_FLAT_KINDS)
    assert {m.__name__ for m in actions._FLAT_JSON} == {actions.ACTION_MODELS[k].__name__ for k in _FLAT_KINDS}


class _Base(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    kind: Literal["k"] = "k"


class _Pattern(_Base):
    text: str = Field(pattern="^a")


class _Excluded(_Base):
    text: str = Field(exclude=True)


class _Validated(_Base):
    text: str

    @field_validator("text")
    @classmethod
    def _upper(cls, value: str) -> str:
        return value.upper()


class _Stripped(_Base):
    model_config = ConfigDict(str_strip_whitespace=True)
    text: str


class _Number(_Base):
    text: int


class _Aliased(_Base):
    text: str = Field(alias="t")


class _Plain(_Base):
    text: str = Field(min_length=2)
    path: str = "."


@pytest.mark.parametrize("model", [_Pattern, _Excluded, _Validated, _Stripped, _Number, _Aliased])
def test_models_the_shortcut_cannot_judge_keep_pydantic(model: type[BaseModel]) -> None:
    assert flat.flat_spec(model, "k") is None


def test_a_plain_model_is_flat() -> None:
    assert flat.flat_spec(_Plain, "k") == (("text", 2, flat.REQUIRED), ("path", 0, "."))
    assert flat.flat_spec(_Plain, "other") is None  # the kind literal must be the kind


def test_forms_of_a_think_proposal_are_the_json_ones() -> None:
    proposal = parse_proposal({"kind": "think", "thought": 'say "hi"\n', "verified": True})
    assert proposal.canonical == '{"kind": "think", "thought": "say \\"hi\\"\\n"}'
    assert proposal.describe() == "think(thought='say \"hi\"\\n')"
    assert proposal.action_json == {"kind": "think", "thought": 'say "hi"\n'}
    assert proposal.claims == {"verified": True}
    assert proposal.model_fields_set == {"raw", "action", "claims"}
    assert parse_proposal({"kind": "think", "thought": "x" * 100}).describe() == "think(thought='" + "x" * 56 + "...)"
    write = parse_proposal({"kind": "write_file", "path": "a.md", "content": "x"})
    assert write.canonical == '{"content": "x", "kind": "write_file", "path": "a.md"}'
    listing = parse_proposal({"kind": "list_dir"})
    assert listing.action is not None and listing.action.model_fields_set == {"kind"}
    assert listing.canonical == '{"kind": "list_dir", "path": "."}'


def test_an_action_changed_behind_validation_is_spelled_by_pydantic() -> None:
    # model_construct skips validation: a non-str value must not be spelled by the shortcut
    odd = actions.Think.model_construct(thought=("a", "b"))
    proposal = Proposal.model_construct(raw={}, action=odd)
    with pytest.warns(UserWarning, match="Expected `str`"):  # pydantic's dump, warning as it does
        assert proposal.canonical == '{"kind": "think", "thought": ["a", "b"]}'


def test_cached_similarity_verdicts_depend_on_the_threshold() -> None:
    a = json.dumps({"kind": "read_file", "path": "notes/alpha.md"}, sort_keys=True)
    b = json.dumps({"kind": "read_file", "path": "notes/alpha2.md"}, sort_keys=True)
    assert 0.9 < text_similarity(a, b) < 0.99
    for _ in range(2):  # the second round reads the cache
        assert _similar(a, b, 0.9) is True
        assert _similar(a, b, 0.99) is False
        assert _similar(b, a, 0.99) is False


def _gates() -> LoopGates:
    return LoopGates(Budget(), FakeClock())


_CALLS = [{"kind": "think", "thought": "plan the next step"}, {"kind": "think", "thought": "check the budget"},
          {"kind": "read_file", "path": "notes/alpha.md"}, {"kind": "read_file", "path": "./notes/alpha.md"},
          {"kind": "read_file", "path": "notes/alpha2.md"}, {"kind": "list_dir", "path": "notes"},
          {"kind": "write_file", "path": "a.md", "content": "x" * 5000},  # too long to be kept
          {"kind": "write_file", "path": "a.md", "content": "x" * 4999 + "y"}]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, len(_CALLS) - 1), st.integers(1, 2), st.sampled_from([1, 2, 3, 4]),
                          st.sampled_from([0.9, 0.99]), st.booleans()), max_size=40))
# a case seen at repeat_limit 3 (recent A, B; A again) met again at 2, where only B is compared
@example([(n % 2, 1, 3, 0.9, False) for n in range(6)] + [(0, 1, 2, 0.9, False)])
def test_the_kept_convergence_verdicts_are_the_computed_ones(moves: list[tuple[int, int, int, float, bool]]) -> None:
    """A gate that keeps the verdicts of the cases it saw answers as one that judges every call afresh,
    whatever the calls, the gaps between decisions, the settings and the restores in between."""
    kept, fresh, decision = _gates(), _gates(), 0
    for call, gap, limit, similarity, restore in moves:
        decision += gap
        for gates in (kept, fresh):
            gates.repeat_limit, gates.similarity = limit, similarity
        if restore:  # a checkpoint's state back: new tuples of recent calls
            kept.restore(kept.state())
        fresh._seen.clear()  # judged afresh every time
        proposal = parse_proposal(dict(_CALLS[call]))
        assert kept.convergence(proposal, decision) == fresh.convergence(proposal, decision)
        assert kept.state() == fresh.state()


def test_a_loop_of_calls_is_judged_once_per_case() -> None:
    gates, judged = _gates(), mock.Mock(wraps=LoopGates._judge)
    with mock.patch.object(LoopGates, "_judge", lambda self, *args: judged(self, *args)):
        verdicts = [gates.convergence(parse_proposal(dict(_CALLS[n % 2])), n) for n in range(1, 41)]
        assert verdicts == ["ok"] * 40
        # the first two calls, then the two cases of the loop (recent A,B + A; recent B,A + B), each once
        assert judged.call_count == 4
        long = [gates.convergence(parse_proposal(dict(_CALLS[6 + n % 2])), 40 + n) for n in range(1, 11)]
        assert judged.call_count == 14  # a long call's case is not kept: judged every time
        assert long[:2] == ["ok", "ok"] and "hint" in long
