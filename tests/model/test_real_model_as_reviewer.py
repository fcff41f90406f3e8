"""The model-backed reviewer against the real local model (SmolLM2-135M-Instruct under llama.cpp's
server, built by ``make model``; skipped with the reason when it is not built).

What is asserted is the reviewer's side, whatever the model judges: one call per cited claim over HTTP,
every finding either a verdict parsed from the model's JSON or ``not_reviewed`` with the reason, the
verdict's status agreeing with its findings, the usage counted, the key nowhere in the verdict. What a
135M model concludes about a claim is recorded, not asserted."""

from __future__ import annotations

import json
import time

import pytest

from harness_lab.proposers import local_model
from harness_lab.proposers.openai_compat import OpenAICompatConfig
from harness_lab.validation.model_reviewer import ModelReviewer

pytestmark = pytest.mark.model


REPORT = (b"# R\n\n## Conclusion\nWith a harness, any model is guaranteed to be 100% correct on every task "
          b"[E:harness-boundary].\n\n## Evidence\n- framing, no claim\n\n## Limitations\nTest material.\n")


def test_the_local_model_reviews_a_cited_claim(model_server: local_model.LocalModelServer, evidence) -> None:
    # One claim, one call, a short answer: a 135M model on a shared 2-core host takes seconds per call.
    config = OpenAICompatConfig(base_url=model_server.base_url, model=model_server.model,
                                api_key=model_server.api_key, temperature=0.0, timeout_s=300, max_retries=0)
    reviewer = ModelReviewer(config, max_tokens=64)
    cpu = time.process_time()
    verdict = reviewer.review(REPORT, evidence)
    assert reviewer.calls == 1 and len(verdict.findings) == 1
    finding = verdict.findings[0]
    assert finding.problem in {"ok", "weak_support", "contradiction", "not_reviewed"}
    assert (verdict.status == "could_not_review") == (finding.problem == "not_reviewed")
    assert verdict.passed == (finding.problem == "ok")
    if finding.problem != "not_reviewed":
        assert reviewer.tokens > 0
    assert model_server.api_key not in verdict.model_dump_json()
    # what the model concluded: shown with -s, not asserted
    print(json.dumps({"calls": reviewer.calls, "tokens": reviewer.tokens, "cpu_s": round(time.process_time() - cpu, 3),
                      "status": verdict.status, "problem": finding.problem, "note": finding.note[:160],
                      "detail": verdict.detail[:160]}))
