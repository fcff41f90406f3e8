"""The OpenAI-compatible proposer on odd but valid replies, and where its API key may never go.

STAND-IN: the replies come from the 127.0.0.1 replay server of ``test_openai_compat.py``,
hand-written in the protocol's shape; not a model.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_openai_compat import KEY, REPLAY, ReplayServer

from harness_lab import Run
from harness_lab.contract import ControlContract
from harness_lab.errors import ConfigError
from harness_lab.evidence import EvidenceCatalogue
from harness_lab.proposers.openai_compat import OpenAICompatConfig, OpenAICompatProposer


@pytest.fixture
def server() -> Iterator[ReplayServer]:
    with ReplayServer() as s:
        yield s


def _env(server: ReplayServer, key: str = KEY) -> dict[str, str]:
    return {"HARNESS_LAB_OPENAI_BASE_URL": server.url, "HARNESS_LAB_OPENAI_MODEL": "replay-model",
            "HARNESS_LAB_OPENAI_API_KEY": key}


def _proposer(server: ReplayServer, key: str = KEY) -> OpenAICompatProposer:
    return OpenAICompatProposer(OpenAICompatConfig.from_env(_env(server, key)), sleep=lambda s: None)


def _run(proposer: OpenAICompatProposer, contract: ControlContract, evidence: EvidenceCatalogue, tmp: Path) -> Run:
    return Run(contract=contract, proposer=proposer, evidence=evidence, workspace=tmp / "ws", run_id="openai")


def _everything(run: Run) -> str:
    return "\n".join([json.dumps(run.capture()), *(r.model_dump_json() for r in run.records),
                      *(e.model_dump_json() for e in run.events)])


# The key's first characters land at offset 190 of the body: the 200-character excerpt cuts through it.
_ECHO = {"error": "x" * 179 + KEY}


@pytest.mark.parametrize("status", [401, 200])  # an error status, and a 200 that is no chat completion
def test_an_echoed_key_cut_by_the_excerpt_leaves_no_part_behind(server: ReplayServer, status: int,
                                                                 contract: ControlContract,
                                                                 evidence: EvidenceCatalogue, tmp_path: Path) -> None:
    server.replies = [{"status": status, "body": _ECHO}]
    run = _run(_proposer(server), contract, evidence, tmp_path)
    record = run.step()
    assert record.proposal is None and record.decision.verdict == "unavailable"  # the endpoint's, not the model's
    assert "x" * 20 in record.decision.reason  # the excerpt is there ...
    assert KEY[:8] not in _everything(run)      # ... but not a piece of the key


def test_a_key_read_with_its_newline_is_sent_without_it(server: ReplayServer, contract: ControlContract,
                                                        evidence: EvidenceCatalogue, tmp_path: Path) -> None:
    server.replies = list(REPLAY["conversation"])
    run = _run(_proposer(server, KEY + "\r\n"), contract, evidence, tmp_path)
    assert run.run().value == "REVIEW_READY"
    assert server.requests[0]["headers"]["Authorization"] == f"Bearer {KEY}"
    assert KEY not in _everything(run)


@pytest.mark.parametrize("key", [KEY[:6] + " " + KEY[6:], KEY[:6] + "\n" + KEY[6:], KEY + "\u00e9"])
def test_a_key_no_header_can_carry_is_a_config_error_that_does_not_show_it(key: str) -> None:
    # Before: http.client refused the header at the first step with an error quoting the key, which
    # the run recorded as its stop reason (in the trace), and the run ended BLOCKED.
    env: dict[str, Any] = {"HARNESS_LAB_OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "HARNESS_LAB_OPENAI_MODEL": "m",
                           "HARNESS_LAB_OPENAI_API_KEY": key}
    with pytest.raises(ConfigError, match="HARNESS_LAB_OPENAI_API_KEY: contains whitespace") as info:
        OpenAICompatConfig.from_env(env)
    assert KEY[:6] not in str(info.value) and KEY[7:] not in str(info.value)


def _reply(message: dict[str, Any], finish_reason: str, total_tokens: int = 50) -> dict[str, Any]:
    return {"status": 200, "body": {"id": "r", "object": "chat.completion", "model": "replay-model", "choices": [
        {"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": total_tokens - 10, "completion_tokens": 10, "total_tokens": total_tokens}}}


def _call(name: str, arguments: Any) -> dict[str, Any]:
    return {"id": f"call-{name}", "type": "function", "function": {"name": name, "arguments": arguments}}


def test_a_reply_cut_at_the_token_limit_says_so(server: ReplayServer, contract: ControlContract,
                                                evidence: EvidenceCatalogue, tmp_path: Path) -> None:
    server.replies = [
        _reply({"content": None, "tool_calls": [_call("write_report", '{"text": "# Conclusion\\n\\nThe harn')]},
               "length", 4096),
        _reply({"content": "Let me think about which evidence to rea"}, "length", 4000),
    ]
    run = _run(_proposer(server), contract, evidence, tmp_path)
    mid_call, prose = run.step(), run.step()
    for record in (mid_call, prose):
        # Before: "arguments are not JSON" (blaming the model's JSON) and the bare prose, no word of the limit.
        assert record.proposal is not None and record.proposal.error is not None
        assert "cut off at the output token limit" in str(record.proposal.raw)
        assert "cut off" in record.proposal.error.message  # what the runtime feeds back
    assert "write_report" in str(mid_call.proposal.raw)
    assert run.usage.tokens == 4096 + 4000 and run.usage.tool_calls == 0



def test_several_tool_calls_in_one_reply_run_the_first_and_record_the_rest(
        server: ReplayServer, contract: ControlContract, evidence: EvidenceCatalogue, tmp_path: Path) -> None:
    # Parallel tool calls (the default of some endpoints), arguments once as an object, once as a string.
    server.replies = [_reply({"content": "Reading both notes.", "tool_calls": [
        _call("read_evidence", {"id": "harness-boundary"}), _call("read_evidence", '{"id": "acceptance-snapshot"}')]},
        "tool_calls")]
    run = _run(_proposer(server), contract, evidence, tmp_path)
    record = run.step()
    assert record.proposal is not None and record.proposal.action is not None
    assert record.proposal.action.model_dump()["id"] == "harness-boundary" and run.usage.tool_calls == 1
    # Before: the second call vanished without a trace; now it is recorded, and not run.
    assert record.proposal.claims["other_tool_calls"] == [
        {"name": "read_evidence", "arguments": '{"id": "acceptance-snapshot"}'}]
    notes = [e for e in run.events if getattr(e, "topic", None) == "claims_ignored"]
    assert notes and "acceptance-snapshot" in notes[0].model_dump_json()
