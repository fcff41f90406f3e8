"""The OpenAI-compatible proposer against a local stand-in server.

STAND-IN: the server below listens on 127.0.0.1 and replays hand-written replies in the shape of
the chat-completions protocol (``openai_replay.json``); it is not a model and was not recorded
from any real service. It checks that the adapter speaks the protocol, charges the endpoint's
token usage to the budget, and never lets the API key into a trace, a checkpoint or a repr.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from jsonpost import JsonPostServer

from harness_lab import Run
from harness_lab.contract import ControlContract
from harness_lab.errors import ConfigError
from harness_lab.evidence import EvidenceCatalogue
from harness_lab.proposers import EndpointFailure
from harness_lab.proposers.openai_compat import OpenAICompatConfig, OpenAICompatProposer

REPLAY = json.loads((Path(__file__).parent / "openai_replay.json").read_text())
KEY = "sk-test-DO-NOT-LEAK-4f1c2a"


class ReplayServer(JsonPostServer):
    """Serves queued (status, body) replies in order and keeps every request it saw."""

    def __init__(self) -> None:
        self.replies: list[dict[str, Any]] = []
        self.requests: list[dict[str, Any]] = []
        super().__init__(self._answer)

    def _answer(self, path: str, headers: Mapping[str, str], body: bytes) -> tuple[int, Any]:
        self.requests.append({"path": path, "headers": headers, "body": json.loads(body)})
        reply = self.replies.pop(0) if self.replies else {"status": 500, "body": {"error": "no reply queued"}}
        return reply["status"], reply["body"]

    def __enter__(self) -> ReplayServer:
        self.start()
        return self


@pytest.fixture
def server() -> Iterator[ReplayServer]:
    with ReplayServer() as s:
        yield s


def _proposer(server: ReplayServer, **overrides: Any) -> OpenAICompatProposer:
    env = {"HARNESS_LAB_OPENAI_BASE_URL": server.url, "HARNESS_LAB_OPENAI_MODEL": "replay-model",
           "HARNESS_LAB_OPENAI_API_KEY": KEY}
    config = OpenAICompatConfig.from_env(env)
    if overrides:
        config = OpenAICompatConfig(**{**config.__dict__, **overrides})
    return OpenAICompatProposer(config, sleep=lambda s: None)


def _run(proposer: OpenAICompatProposer, contract: ControlContract, evidence: EvidenceCatalogue, tmp: Path) -> Run:
    return Run(contract=contract, proposer=proposer, evidence=evidence, workspace=tmp / "ws", run_id="openai")


def test_a_replayed_conversation_reaches_review_ready(server: ReplayServer, contract: ControlContract,
                                                      evidence: EvidenceCatalogue, tmp_path: Path) -> None:
    server.replies = list(REPLAY["conversation"])
    run = _run(_proposer(server), contract, evidence, tmp_path)
    assert run.run().value == "REVIEW_READY"
    assert run.receipt is not None and run.receipt.structural == "passed"
    assert [r.proposal.action.kind for r in run.records if r.proposal and r.proposal.action] == [
        "read_evidence", "read_evidence", "write_report", "finish"]
    # The budget is charged what the endpoint reported, not the offline estimate.
    assert run.usage.tokens == sum(r["body"]["usage"]["total_tokens"] for r in REPLAY["conversation"])
    first = server.requests[0]
    assert first["path"] == "/v1/chat/completions" and first["body"]["model"] == "replay-model"
    assert first["headers"]["Authorization"] == f"Bearer {KEY}"
    assert {t["function"]["name"] for t in first["body"]["tools"]} >= {"read_evidence", "write_report", "finish"}
    assert "Harness boundary" in server.requests[1]["body"]["messages"][1]["content"]  # the read fed back


def test_the_key_never_enters_trace_checkpoint_or_repr(server: ReplayServer, contract: ControlContract,
                                                       evidence: EvidenceCatalogue, tmp_path: Path) -> None:
    server.replies = [REPLAY["server_error"]] * 3 + list(REPLAY["conversation"])
    proposer = _proposer(server)
    run = _run(proposer, contract, evidence, tmp_path)
    run.run()
    dumps = [json.dumps(run.capture()), repr(proposer), repr(proposer._config),
             *(r.model_dump_json() for r in run.records), *(e.model_dump_json() for e in run.events)]
    assert all(KEY not in d for d in dumps)
    assert "api_key" not in repr(proposer._config)


def test_endpoint_errors_are_retried_then_become_data(server: ReplayServer, contract: ControlContract,
                                                      evidence: EvidenceCatalogue, tmp_path: Path) -> None:
    server.replies = [REPLAY["server_error"], *REPLAY["conversation"]]
    proposer = _proposer(server)
    run = _run(proposer, contract, evidence, tmp_path)
    assert run.run().value == "REVIEW_READY" and proposer.calls == 5  # one 503, retried
    server.replies = [REPLAY["server_error"]] * 20
    run2 = _run(_proposer(server, max_retries=1), contract, evidence, tmp_path / "second")
    record = run2.step()  # no crash: an endpoint event, not the model's proposal, and nothing charged
    assert record.proposal is None and record.decision.verdict == "unavailable"
    assert "HTTP 503" in record.decision.reason
    failures = [e for e in record.events if getattr(e, "topic", None) == "endpoint_failure"]
    assert len(failures) == 1 and failures[0].data["status"] == 503 and failures[0].data["attempts"] == 2
    assert run2.usage.decisions == 0 and run2.usage.tokens == 0
    assert "HTTP 503" not in run2.context.view().render(), "an endpoint failure is never shown to the model"
    # three in a row (the contract's max_endpoint_failures): the run waits for the endpoint, resumable
    assert run2.run().value == "WAITING_FOR_ENDPOINT" and len(run2.records) == 3
    assert run2.stop_reason is not None and run2.stop_reason.code == "endpoint_unavailable"
    assert run2.usage.decisions == 0 and not run2.step_due


def test_prose_and_broken_arguments_are_malformed_proposals(server: ReplayServer, contract: ControlContract,
                                                             evidence: EvidenceCatalogue, tmp_path: Path) -> None:
    server.replies = [REPLAY["prose_reply"], REPLAY["bad_arguments_reply"]]
    run = _run(_proposer(server), contract, evidence, tmp_path)
    prose, broken = run.step(), run.step()
    assert prose.proposal is not None and prose.proposal.error is not None and prose.proposal.error.code == "malformed"
    assert broken.proposal is not None and "not JSON" in str(broken.proposal.raw)
    assert run.usage.tokens == 312 + 307 and run.usage.tool_calls == 0 and run.state.value == "RUNNING"


def test_endpoint_tokens_exhaust_a_token_budget(server: ReplayServer, contract: ControlContract,
                                                evidence: EvidenceCatalogue, tmp_path: Path) -> None:
    server.replies = list(REPLAY["conversation"])
    run = _run(_proposer(server), contract.with_budget(max_tokens=1000), evidence, tmp_path)
    assert run.run().value == "EXHAUSTED"
    assert run.receipt is None and run.usage.tokens >= 1000


def test_configuration_errors_name_the_variable() -> None:
    with pytest.raises(ConfigError, match="HARNESS_LAB_OPENAI_BASE_URL, HARNESS_LAB_OPENAI_MODEL"):
        OpenAICompatConfig.from_env({})
    with pytest.raises(ConfigError, match="BASE_URL: 'ftp://x' is not an http"):
        OpenAICompatConfig.from_env({"HARNESS_LAB_OPENAI_BASE_URL": "ftp://x", "HARNESS_LAB_OPENAI_MODEL": "m"})
    config = OpenAICompatConfig.from_env({"HARNESS_LAB_OPENAI_BASE_URL": "http://h/v1/", "HARNESS_LAB_OPENAI_MODEL": "m"})
    assert config.base_url == "http://h/v1" and config.api_key is None


def test_connection_refused_is_data_too(contract: ControlContract, evidence: EvidenceCatalogue, tmp_path: Path) -> None:
    with ReplayServer() as s:
        url = s.url  # the port is free again once the server is gone
    proposer = OpenAICompatProposer(OpenAICompatConfig(base_url=url, model="m", api_key=KEY, max_retries=0))
    out = proposer.propose(_run(proposer, contract, evidence, tmp_path).context.view())
    assert isinstance(out, EndpointFailure) and out.status is None and out.retryable
    assert "ConnectionRefusedError" in out.reason and KEY not in out.reason
