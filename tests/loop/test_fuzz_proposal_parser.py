"""Fuzzing what turns a model's output into a proposal (issue 17): ``parse_proposal`` on any value a
proposer may return, and the OpenAI-compatible proposer on any reply body (plain or a server-sent event
stream). Nothing raises; every outcome is data (a proposal with an action or an error, an endpoint
failure) that a store can keep; and the work is linear in the size of what the model sent (CPU time for
n and 4n: a ratio, never a wall-clock bound).

What the fuzzing found: a lone surrogate in a proposal (``json.loads`` makes one of ``"\\ud800"``) made the
checkpoint raise, as no UTF-8 encoder takes it: it is now refused as data, its raw kept with U+FFFD. And a streamed tool call was assembled by adding each argument piece to the string so
far, which copied it again each time (160k pieces, 23 MB: 57 s of CPU; a model streams a token per event).
"""

from __future__ import annotations

import gc
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonpost import JsonPostServer

from harness_lab import FunctionProposer, Run
from harness_lab.contract import ControlContract
from harness_lab.evidence import EvidenceCatalogue
from harness_lab.persistence.replay import saved_trace
from harness_lab.proposers import EndpointFailure, openai_compat
from harness_lab.proposers.base import ProposerOutput
from harness_lab.proposers.openai_compat import OpenAICompatConfig, OpenAICompatProposer
from harness_lab.records.actions import EXTERNAL_KINDS, FORBIDDEN_KINDS, TOOL_KINDS
from harness_lab.records.proposal import Proposal, parse_proposal
from harness_lab.store import SQLiteStore

FUZZ = settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
KINDS = sorted({*TOOL_KINDS, *EXTERNAL_KINDS, *FORBIDDEN_KINDS, "", "Write_File", "kind", "finish "})
FIELDS = ["kind", "path", "content", "text", "id", "argv", "timeout", "tool_type", "ref_id", "thought", "args",
          "verified", "other_tool_calls", "requested_kind", ""]


class _View:
    """What the proposer reads of a context view: its text (no budget left to cap the reply by)."""

    def render(self) -> str:
        return "context"


class _Loud:
    """A value whose repr raises: a proposer's own object, not JSON."""

    def __repr__(self) -> str:
        raise RuntimeError("no repr")


_TEXT = st.text(alphabet=st.characters(codec=None), max_size=20) | st.sampled_from(
    ["\x00", "\ud800", "[E:x]", "# Conclusion\n", "```", "é" * 3, " ", "-1", "1e400", "NaN"])
_SCALARS = (st.none() | st.booleans() | st.integers() | st.integers(min_value=2**64) | st.floats() | _TEXT)
_JSON = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=4)
                     | st.dictionaries(st.sampled_from(FIELDS) | _TEXT, inner, max_size=5), max_leaves=15)
_ODD = st.recursive(_SCALARS | st.binary(max_size=8) | st.builds(_Loud) | st.frozensets(st.integers(), max_size=3),
                    lambda inner: st.tuples(inner, inner) | st.lists(inner, max_size=3)
                    | st.dictionaries(st.integers() | st.tuples(st.integers()) | _TEXT, inner, max_size=3),
                    max_leaves=8)
_ACTION_LIKE = st.builds(lambda kind, args: {"kind": kind, **args}, st.sampled_from(KINDS),
                         st.dictionaries(st.sampled_from(FIELDS[1:]), _JSON | _ODD, max_size=5))


def _is_data(proposal: Proposal) -> None:
    assert isinstance(proposal, Proposal)
    assert (proposal.action is None) != (proposal.error is None), proposal
    proposal.describe()
    assert len(proposal.args_sha256) == 64
    proposal.model_dump_json()  # what a step row stores


@FUZZ
@given(_JSON | _ODD | _ACTION_LIKE)
def test_any_value_a_proposer_returns_is_a_proposal(raw: Any) -> None:
    _is_data(parse_proposal(raw))


def test_a_cycle_and_deep_nesting_are_proposals_too() -> None:
    loop: list[Any] = []
    loop.append(loop)
    deep: Any = "x"
    for _ in range(5_000):
        deep = [deep]
    for raw in ({"kind": "write_file", "path": "a", "content": loop}, {"kind": "push", "args": deep}, deep,
                {"kind": "think", "thought": "x", "claims": {"loop": loop}}):
        _is_data(parse_proposal(raw))


def test_a_lone_surrogate_is_refused_as_data_and_the_step_is_stored(tmp_path: Path, contract: ControlContract,
                                                                      evidence: EvidenceCatalogue) -> None:
    # json.loads('"\\ud800"') makes a lone surrogate: a model's arguments held one, and the checkpoint
    # raised (no UTF-8 encoder takes it) with the step half done.
    said = [{"kind": "write_file", "path": "a.md", "content": "x\ud800"}, "prose \udfff",
            {"kind": "read_evidence", "id": "harness-boundary", "note": "\udc80"}, {"kind": "push", "args": "\ud800"}]
    store = SQLiteStore(tmp_path / "s.sqlite")
    run = Run(contract=contract, proposer=FunctionProposer(lambda view: said.pop(0) if said else {"kind": "finish"}),
              evidence=evidence, workspace=tmp_path / "ws", run_id="R", store=store)
    records = [run.step() for _ in range(4)]
    run.close()
    errors = [r.proposal.error for r in records if r.proposal is not None]
    assert [e.code if e else None for e in errors] == ["bad_arguments", "malformed", "bad_arguments", "bad_arguments"]
    assert not (tmp_path / "ws" / "a.md").exists()  # refused: nothing written
    stored = [r.summary() for r in saved_trace(store, "R")]
    store.close()
    assert len(stored) == 4 and "\ufffd" in records[0].model_dump_json(ensure_ascii=False)


# -- the model's reply ----------------------------------------------------------------------------------
_ARGUMENTS = (_TEXT | _JSON.map(json.dumps) | _JSON | st.just('\ufeff{"path": "a"}')
              | st.builds(lambda d, cut: json.dumps(d)[:cut], st.dictionaries(st.sampled_from(FIELDS), _TEXT), st.integers(0, 30)))
_CALL = st.fixed_dictionaries({}, optional={
    "function": st.fixed_dictionaries({}, optional={"name": st.sampled_from(KINDS) | _JSON, "arguments": _ARGUMENTS})
    | _JSON, "type": _TEXT, "id": _JSON})
_MESSAGE = st.fixed_dictionaries({}, optional={
    "content": _TEXT | st.lists(st.fixed_dictionaries({"type": st.sampled_from(["text", "image"]), "text": _JSON})) | _JSON,
    "tool_calls": st.lists(_CALL | _JSON, max_size=3) | _JSON, "role": _TEXT})
_USAGE = st.fixed_dictionaries({}, optional={k: _JSON | st.integers(-5, 10**6) for k in
                                             ("total_tokens", "prompt_tokens", "completion_tokens")})
_REPLY = st.fixed_dictionaries({"choices": st.lists(st.fixed_dictionaries({"message": _MESSAGE | _JSON}, optional={
    "finish_reason": st.sampled_from(["stop", "length", "tool_calls", None])}), max_size=2) | _JSON},
    optional={"usage": _USAGE | _JSON})


def _propose(payload: bytes, *, stream: bool = False, status: int = 200) -> ProposerOutput | EndpointFailure:
    config = OpenAICompatConfig(base_url="http://127.0.0.1:9/v1", model="fuzz", api_key="hlfuzz-key-0123456789",
                                max_retries=0, stream=stream)
    proposer = OpenAICompatProposer(config, transport=lambda url, body, headers, timeout: (status, payload))
    return proposer.propose(_View())  # type: ignore[arg-type]  # the view's text is all it reads


def _outcome_is_data(out: ProposerOutput | EndpointFailure) -> None:
    assert isinstance(out, (ProposerOutput, EndpointFailure)), out
    if isinstance(out, ProposerOutput):
        assert out.tokens is None or out.tokens >= 0
        _is_data(parse_proposal(out.raw))
    else:
        assert "\n" not in out.reason or out.status == 200


@FUZZ
@given(_REPLY | _JSON, st.integers(0, 3))
def test_any_reply_body_is_a_proposal_or_an_endpoint_failure(reply: Any, spelling: int) -> None:
    payload = json.dumps(reply).encode()
    if spelling == 1:  # a byte order mark first, as some servers' encoders write
        payload = b"\xef\xbb\xbf" + payload
    elif spelling == 2:  # cut short
        payload = payload[: len(payload) // 2]
    _outcome_is_data(_propose(payload))
    _outcome_is_data(_propose(payload, status=500 + spelling))


@FUZZ
@given(st.binary(max_size=300))
def test_any_bytes_are_a_proposal_or_an_endpoint_failure(payload: bytes) -> None:
    _outcome_is_data(_propose(payload))
    _outcome_is_data(_propose(payload, stream=True))


_DELTA = st.fixed_dictionaries({}, optional={
    "content": _TEXT | _JSON, "tool_calls": st.lists(st.fixed_dictionaries({}, optional={
        "index": st.integers(-2, 3) | _JSON, "function": st.fixed_dictionaries({}, optional={
            "name": st.sampled_from(KINDS) | _JSON, "arguments": _ARGUMENTS}) | _JSON}) | _JSON, max_size=2) | _JSON})
_EVENT = st.fixed_dictionaries({"choices": st.lists(st.fixed_dictionaries({"delta": _DELTA | _JSON}, optional={
    "finish_reason": st.sampled_from(["stop", "length", "tool_calls", None])}), max_size=2) | _JSON},
    optional={"usage": _USAGE | _JSON})


@FUZZ
@given(st.lists(_EVENT.map(json.dumps) | _TEXT | st.just("[DONE]"), max_size=6), st.booleans())
def test_any_event_stream_is_a_proposal_or_an_endpoint_failure(events: list[str], prefix: bool) -> None:
    payload = "\n\n".join(("data: " if prefix or n else "") + e for n, e in enumerate(events)).encode("utf-8", "replace")
    _outcome_is_data(_propose(payload, stream=True))


# -- linear time ------------------------------------------------------------------------------------------
def _cpu(work: Callable[[], object]) -> float:
    best = float("inf")
    gc.collect()
    gc.disable()  # a full collection walks every object alive, the test's own: not the parser's cost
    try:
        for _ in range(3):  # the best of three: a page fault is not the parser either
            start = time.process_time()
            work()
            best = min(best, time.process_time() - start)
    finally:
        gc.enable()
    return best


def _stream(pieces: int) -> bytes:
    """A tool call streamed as a model streams it: its arguments a few characters per event."""
    def event(delta: dict[str, Any]) -> str:
        return "data: " + json.dumps({"choices": [{"delta": delta}]})
    head = event({"tool_calls": [{"index": 0, "function": {"name": "write_file",
                                                           "arguments": '{"path": "a.md", "content": "'}}]})
    piece = event({"tool_calls": [{"index": 0, "function": {"arguments": "word " * 10}}]})
    tail = event({"tool_calls": [{"index": 0, "function": {"arguments": '"}'}}]})
    return "\n\n".join([head, *[piece] * pieces, tail, "data: [DONE]"]).encode()


def _reply(size: int) -> bytes:
    arguments = json.dumps({"path": "a.md", "content": "[E:x] # h\n" * (size // 10)})
    return json.dumps({"choices": [{"message": {"tool_calls": [{"function": {"name": "write_file",
                                                                              "arguments": arguments}}]}}]}).encode()


def _streamed(n: int) -> Callable[[], object]:
    payload = _stream(n // 100)
    return lambda: _propose(payload, stream=True)


def _long_argument(n: int) -> Callable[[], object]:
    payload = _reply(n)
    return lambda: parse_proposal(_propose(payload).raw)  # type: ignore[union-attr]


def _claims(n: int) -> Callable[[], object]:
    raw = {"kind": "think", "thought": "x", **{f"c{i}": [i, "v"] for i in range(n // 100)}}
    return lambda: parse_proposal(raw)


def _prose(n: int) -> Callable[[], object]:
    payload = json.dumps({"choices": [{"message": {"content": "ab " * (n // 3)}}]}).encode()
    return lambda: _propose(payload)


# Each case makes its input of about n bytes first, then returns the work timed.
CASES: dict[str, Callable[[int], Callable[[], object]]] = {
    "a streamed call, a piece per event": _streamed, "one long argument": _long_argument,
    "many claims": _claims, "prose, no call": _prose,
}


@pytest.mark.parametrize("case", list(CASES))
def test_reading_a_reply_is_linear_in_its_size(case: str) -> None:
    make = CASES[case]
    # 16x the input: a quadratic cost shows as 256x even where its constant is small
    small, large = make(500_000), make(8_000_000)
    a, b = _cpu(small), _cpu(large)
    # Linear is ~16x; below 5 ms the clock's grain dominates, so such a pair passes as it is.
    assert b < 32 * max(a, 0.005), f"{case}: {a:.3f}s for n, {b:.3f}s CPU for 16n"


def test_a_reply_without_end_is_an_endpoint_failure_not_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    # A server may answer fast and without end: the deadline alone let a loopback flood fill memory.
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(openai_compat, "MAX_REPLY_BYTES", 1 << 20)
    flood = {"choices": [{"message": {"content": "x" * (3 << 20)}}]}
    with JsonPostServer(lambda path, headers, body: (200, flood)) as server:
        proposer = OpenAICompatProposer(OpenAICompatConfig(base_url=server.url, model="flood", max_retries=1,
                                                           timeout_s=30.0), sleep=lambda s: None)
        out = proposer.propose(_View())  # type: ignore[arg-type]
    assert isinstance(out, EndpointFailure) and out.attempts == 2, out
    assert "over 1 MiB" in out.reason
