"""The hot path's shortcuts give exactly what the slow forms gave: the JSON copy of a raw
proposal, the redaction pre-check, and the convergence similarity."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from harness_lab.loop.gates import _similar, text_similarity
from harness_lab.records.proposal import _jsonable
from harness_lab.records.redaction import Redactor, _replace

_leaf = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=8))
_values = st.recursive(
    _leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(inner, inner),
        st.dictionaries(st.text(max_size=5), inner, max_size=4),
        st.dictionaries(st.integers(), inner, max_size=2),
    ),
    max_leaves=12,
)


def _round_trip(value: object) -> Any:
    try:
        return json.loads(json.dumps(value, default=repr))
    except (TypeError, ValueError):
        return repr(value)


@settings(max_examples=400, deadline=None)
@given(_values)
def test_jsonable_equals_the_json_round_trip(value: object) -> None:
    fast, slow = _jsonable(value), _round_trip(value)
    assert json.dumps(fast, sort_keys=False) == json.dumps(slow, sort_keys=False)
    assert type(fast) is type(slow)


def test_jsonable_copies_and_survives_cycles() -> None:
    raw = {"kind": "write_file", "args": ["a"]}
    copied = _jsonable(raw)
    raw["args"].append("b")  # type: ignore[attr-defined]
    assert copied == {"kind": "write_file", "args": ["a"]}
    loop: list[object] = [1]
    loop.append(loop)
    assert _jsonable(loop) == repr(loop)


_PIECES = ["password", "PassWord", "pwd", "api-key", "API_KEY", "apikey", "secret", "token", "tokens", "Bearer ",
           "bearer abcdefghij", "AKIAABCDEFGHIJKLMNOP", "sk-abcdefghijklmnopq", "ghp_" + "a" * 22, "ſecret", "apı_key",
           "-----BEGIN RSA PRIVATE KEY-----abc-----END RSA PRIVATE KEY-----", ":", "=", " ", '"', '\\"', "x",
           "hunter22", "\n", "İ", ",", "secre"]


@settings(max_examples=1500, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=8).map("".join))
def test_redaction_pre_check_never_skips_a_match(text: str) -> None:
    redactor = Redactor(["secrets"])
    assert redactor._re is not None
    expected = redactor._re.sub(_replace, text)
    assert redactor(text) == expected


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="abc{}\":, ", max_size=30), st.text(alphabet="abc{}\":, ", max_size=30),
       st.sampled_from([0.5, 0.8, 0.9]))
def test_similarity_shortcuts_agree_with_the_full_ratio(a: str, b: str, threshold: float) -> None:
    left, right = json.dumps({"kind": "k", "x": a}), json.dumps({"kind": "k", "x": b})
    # the definition, computed without a shortcut (it was difflib's ratio of the whole texts before the
    # gate compared each argument alone: see harness_lab.loop.gates)
    assert _similar(left, right, threshold) == (text_similarity(left, right) >= threshold)


def test_a_proposals_derived_forms_are_made_once_and_equal_the_slow_forms() -> None:
    from harness_lab.records.proposal import parse_proposal

    first = parse_proposal({"kind": "read_file", "path": "notes.md"})
    other = parse_proposal({"kind": "write_file", "path": "b.md", "content": "x"})
    assert first.action is not None
    assert first.action_json == first.action.model_dump(mode="json")
    assert first.canonical == json.dumps(first.action_json, sort_keys=True, default=str)
    assert first.describe() == "read_file(path='notes.md')"
    # made on the first read, then read back from the instance: the very same objects
    assert first.action_json is first.action_json and first.canonical is first.canonical
    # per instance, never shared between proposals
    assert other.canonical != first.canonical and other.describe().startswith("write_file(")
    invalid = parse_proposal({"kind": "no_such_tool"})
    assert invalid.action_json is None
    assert invalid.canonical == json.dumps(invalid.raw, sort_keys=True, default=str)
    assert invalid.describe() == "invalid proposal (unknown_kind)"
