"""The per-step checkpoint's shortcuts keep its guarantees: JSON redacted piece by piece (with a memo
of clean pieces) equals the whole-text redaction, and a step without a ledger entry skips only the
ledger update: every effect still ends committed with its step."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from persisthelpers import PUSH_STEP, CountingOutbox, push_run

from harness_lab.persistence.checkpoint import _dumps
from harness_lab.records.redaction import Redactor, _replace
from harness_lab.store import InMemoryStore, SQLiteStore

_WORDS = ["password", "PassWord", "pwd", "api-key", "API_KEY", "secret", "token", "tokens", "Bearer ",
          "bearer abcdefghij", "AKIAABCDEFGHIJKLMNOP", "sk-abcdefghijklmnopq", "ghp_" + "a" * 22, "ſecret",
          "-----BEGIN RSA PRIVATE KEY-----abc-----END RSA PRIVATE KEY-----",
          "-----BEGIN RSA PRIVATE KEY-----a,b-----END RSA PRIVATE KEY-----", ":", "=", " ", '"', '\\"', "x",
          "hunter22", ",", ',"', "{", "}", "[", "İ", "7", "AKIA1234567890ABCDEF", "sk-0123456789012345",
          "Bearer 12345678", "token=12", "token=123", "9", "\n", "\t", "é", "\x07", "Bearer\t12345678"]
_text = st.lists(st.sampled_from(_WORDS), max_size=10).map("".join)
_json = st.recursive(st.one_of(st.none(), st.integers(), _text),
                     lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(_text, inner, max_size=3)),
                     max_leaves=8)
_MEMO = Redactor(["secrets"])  # shared on purpose: later examples meet pieces earlier ones left in the memo


def _whole(redactor: Redactor, text: str) -> str:
    assert redactor._re is not None
    return redactor._re.sub(_replace, text)


@settings(max_examples=1500, deadline=None)
@given(st.one_of(_text, _json.map(lambda v: json.dumps(v, separators=(",", ":"), ensure_ascii=False)),
                 _json.map(lambda v: json.dumps(v, separators=(",", ":")))))  # escapes: \n, \u00e9 ...
def test_piecewise_redaction_equals_the_whole_text_redaction(text: str) -> None:
    assert _MEMO.json(text) == _whole(_MEMO, text)
    assert _MEMO.clean(text) == (_MEMO._re is not None and _MEMO._re.search(text) is None)
    assert _MEMO.clean(text) == (_MEMO._re is not None and _MEMO._re.search(text) is None)  # from the memo


_AFTER_ESCAPES = ["found\nsk-abcdefghijklmnopqrstu", "x\tAKIAABCDEFGHIJKLMNOP", "auth: Bearer\tabcdefghijk",
                  "Bearer\nabcdefghijk"]


@pytest.mark.parametrize(("text", "ascii_only"), [*((t, a) for t in _AFTER_ESCAPES for a in (True, False)),
                                                  ("\u00e9ghp_" + "a" * 22, True)])  # é spelled \u00e9
def test_a_secret_right_after_a_json_escape_is_redacted(text: str, ascii_only: bool) -> None:
    """In a stored row a newline before a key is the two characters \\n: the key starts after a word
    character, where a plain \\b finds no boundary. (A key glued to a letter, "éghp_...", is one word
    and is left alone, as before.)"""
    row = json.dumps({"kind": "step", "note": text}, ensure_ascii=ascii_only)
    redactor = Redactor(["secrets"])
    assert not redactor.clean(row)
    redacted = redactor.json(row)
    assert "[REDACTED]" in redacted and json.loads(redacted)["note"] != text
    for secret in ("sk-abcdefghijklmnopqrstu", "AKIAABCDEFGHIJKLMNOP", "ghp_" + "a" * 22, "abcdefghijk"):
        assert secret not in redacted


def test_a_secret_in_a_new_piece_is_found_after_its_neighbours_were_seen(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BENCH_API_TOKEN", "abc,de\"f" + "g" * 8)  # has a quote: never a literal pattern
    # Ends with a comma: in JSON it can end right before a quote, across the ',"' the pieces split at
    # (so env values are matched on the whole text).
    monkeypatch.setenv("OTHER_SECRET", "zzyy" + "q" * 8 + ",")
    redactor = Redactor(["secrets"])
    step = {"kind": "step", "step": 1, "note": "plain text"}
    assert redactor.clean(json.dumps(step))
    step.update(step=2, note="then sk-abcdefghijklmnopqrstu leaked")
    assert "[REDACTED]" in redactor.json(json.dumps(step)) and "sk-abc" not in redactor.json(json.dumps(step))
    assert redactor.clean(json.dumps({"kind": "step", "note": "x,"}, separators=(",", ":")))  # '}' seen
    leaked = json.dumps({"kind": "step", "note": "zzyy" + "q" * 8 + ","}, separators=(",", ":"))
    assert not redactor.clean(leaked) and "zzyy" not in redactor.json(leaked)


_plain = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.text(), st.floats(allow_nan=False)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.tuples(inner), st.dictionaries(st.text(), inner, max_size=3)),
    max_leaves=10)


@settings(max_examples=500, deadline=None)
@given(_plain)
def test_the_fast_json_is_the_json_of_json_dumps(value: object) -> None:
    fast, slow = _dumps(value), json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    assert json.loads(fast) == json.loads(slow)
    if not any(isinstance(x, float) for x in _leaves(value)):  # a float may be spelled 1e-7 for 1e-07
        assert fast == slow


def _leaves(value: object) -> list[object]:
    if isinstance(value, (list, tuple)):
        return [leaf for v in value for leaf in _leaves(v)]
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in _leaves(v)]
    return [value]


def test_the_fast_json_spells_non_finite_floats_as_python_does() -> None:
    value = [float("nan"), float("inf"), -float("inf")]
    assert _dumps(value) == json.dumps(value, separators=(",", ":")) == "[NaN,Infinity,-Infinity]"


@pytest.mark.parametrize("kind", ["sqlite", "memory"])
def test_every_effect_is_committed_with_its_step(tmp_path: Path, kind: str) -> None:
    store = SQLiteStore(tmp_path / "runs.sqlite") if kind == "sqlite" else InMemoryStore()
    run = push_run(tmp_path / "ws", store, CountingOutbox())
    run.run()
    effects = store.effects("R1")
    assert {e.step for e in effects} >= {3, PUSH_STEP, 5, 6}, effects  # the writes, the push, the report
    assert all(e.status == "committed" for e in effects), effects
    run.close()


def test_the_ledger_update_is_skipped_only_for_steps_without_an_effect(tmp_path: Path) -> None:
    """The skip is only for steps the checkpointer knows have no entry: an intent a crashed process
    left is settled by the first commit after resume (see test_persist_crash_resume)."""
    store = SQLiteStore(tmp_path / "runs.sqlite")
    run = push_run(tmp_path / "ws", store, CountingOutbox())
    run.step()  # a read: no ledger entry, the update is skipped
    assert run.checkpoints is not None and not run.checkpoints._unsettled
    run.step()
    run.step()  # write_file: an intent, settled by this step's commit
    assert [e.status for e in store.effects("R1", 3)] == ["committed"]
    run.close()
