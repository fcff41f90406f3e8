"""The model-backed goal-layer reviewer, against STAND-IN endpoints on 127.0.0.1 (never a model): one
call per cited claim, a strict JSON answer parsed, and every failure - an endpoint down, an HTTP error,
an answer that is not the JSON asked for - a verdict of "could not review", never an exception."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Mapping
from typing import Any

import pytest
from jsonpost import JsonPostServer

from harness_lab.errors import ConfigError
from harness_lab.proposers.openai_compat import OpenAICompatConfig
from harness_lab.validation.model_reviewer import ModelReviewer
from harness_lab.validation.semantic import SemanticReviewer

KEY = "sk-review-DO-NOT-LEAK-51c3"
REPORT = (b"# R\n\n## Conclusion\nThe runtime decides which evidence moves the task state [E:harness-boundary].\n\n"
          b"## Evidence\n- Budgets are checked before a call [E:budget-gates].\n- framing without a citation\n\n"
          b"## Limitations\nTest material.\n")


def _reply(content: Any, tokens: int = 30) -> dict[str, Any]:
    return {"choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": tokens - 5, "completion_tokens": 5, "total_tokens": tokens}}


class Judge:
    """Answers each claim from ``answers`` (first match of a word of the claim), recording the requests."""

    def __init__(self, answers: Mapping[str, Any], status: int = 200) -> None:
        self.answers, self.status, self.requests = answers, status, []  # type: ignore[var-annotated]

    def __call__(self, path: str, headers: Mapping[str, str], body: bytes) -> tuple[int, Any]:
        if headers.get("Authorization") != f"Bearer {KEY}":
            return 401, {"error": {"message": "invalid api key"}}
        request = json.loads(body)
        self.requests.append((path, request))
        if self.status != 200:
            return self.status, {"error": {"message": f"overloaded; key was {KEY}"}}
        claim = request["messages"][-1]["content"].rsplit("Claim: ", 1)[1]
        answer = next(v for k, v in self.answers.items() if k in claim)
        return 200, answer if isinstance(answer, dict) and "choices" in answer else _reply(answer)


def _reviewer(url: str, **kw: Any) -> ModelReviewer:
    return ModelReviewer(OpenAICompatConfig(base_url=url, model="judge", api_key=KEY, max_retries=1, timeout_s=5),
                         sleep=lambda s: None, **kw)


def test_each_cited_claim_is_one_call_and_the_answers_make_the_verdict(evidence) -> None:
    judge = Judge({"runtime": '{"verdict": "supported", "reason": "the note says so"}',
                   "Budgets": '```json\n{"verdict": "contradicted", "reason": "checked before, not after"}\n```'})
    with JsonPostServer(judge) as server:
        reviewer = _reviewer(server.url)
        plugged: SemanticReviewer = reviewer  # the protocol the finish check and the study take
        verdict = plugged.review(REPORT, evidence)
    assert verdict.reviewer == "model(judge)"
    assert verdict.status == "reviewed" and not verdict.passed
    assert [(f.section, f.problem, f.note) for f in verdict.findings] == [
        ("conclusion", "ok", "the note says so"), ("evidence", "contradiction", "checked before, not after")]
    assert reviewer.calls == 2 and reviewer.tokens == 60
    path, request = judge.requests[0]
    assert path == "/v1/chat/completions" and request["response_format"]["type"] == "json_schema"
    schema = request["response_format"]["json_schema"]["schema"]
    assert schema["properties"]["verdict"]["enum"] == ["supported", "not_supported", "contradicted"]
    assert "[E:harness-boundary]" in request["messages"][1]["content"] and "A harness is the runtime" in \
        request["messages"][1]["content"] and "Budgets" not in request["messages"][1]["content"]
    assert request["temperature"] == 0.0


def test_uncited_and_unknown_sources_are_judged_without_a_call(evidence) -> None:
    judge = Judge({"": '{"verdict": "supported", "reason": "ok"}'})
    text = b"## Conclusion\nHarnesses are good.\n\n## Evidence\n- A survey agrees [E:nope].\n"
    with JsonPostServer(judge) as server:
        verdict = _reviewer(server.url).review(text, evidence)
    assert [f.problem for f in verdict.findings] == ["no_citation", "unknown_source"] and not verdict.passed
    assert judge.requests == []


@pytest.mark.parametrize(("answer", "says"), [
    ("The claim is supported.", "not JSON"),
    ('["supported"]', "not a JSON object"),
    ('{"verdict": "probably", "reason": "x"}', "'probably' is not one of supported, not_supported, contradicted"),
    ('{"verdict": "supported", "reason": 3}', "reason is not a string"),
    ({"choices": []}, "not a chat completion"),
    (None, "not a chat completion"),
])
def test_an_answer_it_cannot_read_is_could_not_review(answer: Any, says: str, evidence) -> None:
    judge = Judge({"runtime": answer, "Budgets": '{"verdict": "supported", "reason": "ok"}'})
    with JsonPostServer(judge) as server:
        verdict = _reviewer(server.url).review(REPORT, evidence)
    assert verdict.status == "could_not_review" and not verdict.passed and says in verdict.detail
    assert [f.problem for f in verdict.findings] == ["not_reviewed", "ok"]
    assert verdict.reasons[0].startswith("could_not_review: ")


def test_an_endpoint_error_is_could_not_review_with_the_key_masked(evidence) -> None:
    judge = Judge({}, status=503)
    with JsonPostServer(judge) as server:
        reviewer = _reviewer(server.url)
        verdict = reviewer.review(REPORT, evidence)
    assert verdict.status == "could_not_review" and "HTTP 503" in verdict.detail
    assert KEY not in verdict.model_dump_json() and "***" in verdict.detail
    assert reviewer.calls == 4  # two claims, each asked twice (max_retries=1): a 503 may heal


def test_a_wrong_key_is_asked_once(evidence) -> None:
    with JsonPostServer(Judge({})) as server:
        config = OpenAICompatConfig(base_url=server.url, model="judge", api_key="sk-wrong-key-000", max_retries=3)
        reviewer = ModelReviewer(config, sleep=lambda s: None)
        verdict = reviewer.review(REPORT, evidence)
    assert verdict.status == "could_not_review" and "HTTP 401" in verdict.detail and reviewer.calls == 2


def test_no_server_is_could_not_review(evidence) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    verdict = _reviewer(f"http://127.0.0.1:{port}/v1").review(REPORT, evidence)
    assert verdict.status == "could_not_review" and verdict.detail.startswith("endpoint: ")
    assert [f.problem for f in verdict.findings] == ["not_reviewed", "not_reviewed"]


def test_max_claims_bounds_the_calls(evidence) -> None:
    judge = Judge({"": '{"verdict": "supported", "reason": "ok"}'})
    with JsonPostServer(judge) as server:
        reviewer = _reviewer(server.url, max_claims=1)
        verdict = reviewer.review(REPORT, evidence)
    assert reviewer.calls == 1 and verdict.status == "could_not_review" and "max_claims" in verdict.findings[1].note
    with pytest.raises(ValueError, match="max_claims"):
        _reviewer(server.url, max_claims=0)


def test_the_response_format_asked_is_the_one_configured(evidence) -> None:
    judge = Judge({"": '{"verdict": "not_supported", "reason": "too broad"}'})
    with JsonPostServer(judge) as server:
        _reviewer(server.url, response_format="json_object").review(REPORT, evidence)
        verdict = _reviewer(server.url, response_format="none").review(REPORT, evidence)
    assert judge.requests[0][1]["response_format"] == {"type": "json_object"}
    assert "response_format" not in judge.requests[-1][1]
    with pytest.raises(ValueError, match="response_format: one of"):
        _reviewer(server.url, response_format="yaml")  # type: ignore[arg-type]
    assert verdict.status == "reviewed" and [f.problem for f in verdict.findings] == ["weak_support"] * 2


def test_an_endpoint_that_hangs_is_could_not_review_within_the_deadline(evidence) -> None:
    release = threading.Event()

    def hang(path: str, headers: Mapping[str, str], body: bytes) -> tuple[int, Any]:
        release.wait(30)  # until the test ends: the reviewer's deadline must end the call first
        return 200, _reply('{"verdict": "supported", "reason": "late"}')

    with JsonPostServer(hang) as server:
        try:
            config = OpenAICompatConfig(base_url=server.url, model="judge", timeout_s=0.3, max_retries=0)
            reviewer = ModelReviewer(config)
            verdict = reviewer.review(REPORT, evidence)
        finally:
            release.set()
    assert verdict.status == "could_not_review" and "no reply within 0.3s" in verdict.detail
    assert reviewer.calls == 2 and [f.problem for f in verdict.findings] == ["not_reviewed", "not_reviewed"]


def test_from_env_without_an_endpoint_is_one_config_error() -> None:
    with pytest.raises(ConfigError, match="HARNESS_LAB_OPENAI_BASE_URL, HARNESS_LAB_OPENAI_MODEL not set"):
        ModelReviewer.from_env({})
    reviewer = ModelReviewer.from_env({"HARNESS_LAB_OPENAI_BASE_URL": "http://127.0.0.1:9/v1",
                                       "HARNESS_LAB_OPENAI_MODEL": "m", "HARNESS_LAB_OPENAI_API_KEY": KEY})
    assert KEY not in repr(reviewer) and reviewer.name == "model(m)"
