"""A model-backed goal-layer reviewer: asks any OpenAI-compatible endpoint, claim by claim, whether
the cited notes support the claim.

It plugs in where :class:`~harness_lab.validation.semantic.EvidenceSupportReviewer` does (the
``SemanticReviewer`` protocol). Each claim sentence with known citations is one chat-completions call
carrying the claim and the text of the notes it cites; the model must answer with one JSON object::

    {"verdict": "supported" | "not_supported" | "contradicted", "reason": "<one sentence>"}

Claims that cite nothing (in the Conclusion) or an unknown note are judged without a call, as the
default reviewer judges them. The endpoint is configured like the proposer's
(:class:`~harness_lab.proposers.openai_compat.OpenAICompatConfig`, ``HARNESS_LAB_OPENAI_*``) and
called through the same transport (the whole call bounded by ``timeout_s``, replies past
``MAX_REPLY_BYTES`` refused); the key goes in the ``Authorization`` header only and is masked in
anything the endpoint sends back.

A reviewer that cannot judge says so as data, never by raising: an endpoint that fails (no reply, a
timeout, HTTP errors after ``max_retries``) or an answer that is not that JSON object makes the claim's
finding ``not_reviewed`` and the verdict ``status="could_not_review"`` with ``passed=False`` - a report
nobody could review is not delivered as reviewed. A model is one more judge that can be wrong; its
verdict is kept apart from the structural one like any other.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Mapping
from typing import Any, Literal

from ..evidence import EvidenceNote
from ..proposers.openai_compat import OpenAICompatConfig, Transport, post_chat, urllib_transport
from ..records.redaction import SecretMask
from .report import find_citations
from .semantic import ClaimFinding, ClaimProblem, SemanticVerdict, _claims, _without_markers

__all__ = ["REVIEW_SYSTEM_PROMPT", "ModelReviewer", "ResponseFormat"]

REVIEW_SYSTEM_PROMPT = (
    "You check one claim against the notes it cites. Judge only from the notes, not from what you know. "
    "Answer with one JSON object and nothing else: "
    '{"verdict": "supported" | "not_supported" | "contradicted", "reason": "<one short sentence>"}. '
    "supported: the notes state the claim, with the same numbers, names and scope. contradicted: the notes "
    "say the opposite (a negation, another number, another actor). not_supported: anything else, including "
    "a claim broader or stronger than the notes."
)
_VERDICTS: dict[str, ClaimProblem] = {"supported": "ok", "not_supported": "weak_support", "contradicted": "contradiction"}
_FENCE = re.compile(r"^```(?:json)?\s*|\s*```$")
_ANSWER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"verdict": {"type": "string", "enum": ["supported", "not_supported", "contradicted"]},
                   "reason": {"type": "string"}},
    "required": ["verdict", "reason"],
    "additionalProperties": False,
}
# How the reply is constrained: OpenAI's structured outputs (llama.cpp's server turns the schema into a
# grammar), any JSON object, or nothing asked (the prompt alone; the answer is parsed as strictly).
ResponseFormat = Literal["json_schema", "json_object", "none"]
_MAX_NOTE_CHARS = 8000  # per claim: a note past this is cut (the prompt says so), not sent whole


class ModelReviewer:
    """``ModelReviewer(OpenAICompatConfig(...))``: a ``SemanticReviewer`` backed by a chat model.

    ``response_format`` asks the endpoint to constrain the reply: ``"json_schema"`` (the answer's schema,
    OpenAI's structured outputs; llama.cpp's server makes it a grammar), ``"json_object"`` (any JSON
    object: older servers) or ``"none"``; the answer is parsed as strictly either way. ``max_claims`` bounds the calls one review makes (the claims
    past it are ``not_reviewed``: the verdict says it could not review them all). ``calls`` and ``tokens``
    count what the reviewer spent, over its life.
    """

    def __init__(self, config: OpenAICompatConfig, *, transport: Transport | None = None,
                 response_format: ResponseFormat = "json_schema", max_claims: int = 64, max_tokens: int = 160,
                 system_prompt: str = REVIEW_SYSTEM_PROMPT, sleep: Callable[[float], None] = time.sleep) -> None:
        if max_claims < 1:
            raise ValueError(f"max_claims must be >= 1, got {max_claims}")
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
        self._config = config
        self._transport: Transport = transport or urllib_transport
        if response_format not in ("json_schema", "json_object", "none"):
            raise ValueError(f"response_format: one of json_schema, json_object, none; got {response_format!r}")
        self._response_format = response_format
        self.max_claims = max_claims
        self._max_tokens = max_tokens
        self._system = system_prompt
        self._sleep = sleep
        self._mask = SecretMask([config.api_key] if config.api_key else [])
        self.calls = 0
        self.tokens = 0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ModelReviewer:
        return cls(OpenAICompatConfig.from_env(env))

    def __repr__(self) -> str:
        return f"ModelReviewer(base_url={self._config.base_url!r}, model={self._config.model!r})"

    @property
    def name(self) -> str:
        return f"model({self._config.model})"

    def review(self, report: bytes, evidence: Mapping[str, EvidenceNote]) -> SemanticVerdict:
        text = report.decode("utf-8-sig", errors="replace")
        findings: list[ClaimFinding] = []
        problems: list[str] = []
        asked = 0
        for section, claim in _claims(text):
            cited = tuple(dict.fromkeys(find_citations(claim)[0]))
            bare = _without_markers(claim).strip()
            if not cited:
                if section in ("conclusion", "结论"):
                    findings.append(ClaimFinding(section=section, claim=bare, cited=(), support=0.0, problem="no_citation"))
                continue  # uncited prose in Evidence is framing, as the default reviewer reads it
            if any(cid not in evidence for cid in cited):
                findings.append(ClaimFinding(section=section, claim=bare, cited=cited, support=0.0,
                                             problem="unknown_source"))
                continue
            if not bare.strip(" \t()[],;.") and section not in ("conclusion", "结论"):
                continue  # a line of citations alone in Evidence: a source list, no claim
            if asked >= self.max_claims:
                problems.append(f"more than {self.max_claims} claims: the rest were not sent")
                findings.append(ClaimFinding(section=section, claim=bare, cited=cited, support=0.0,
                                             problem="not_reviewed", note="not sent: max_claims reached"))
                continue
            asked += 1
            answer = self._ask(bare, {cid: evidence[cid] for cid in cited})
            if isinstance(answer, str):
                problems.append(answer)
                findings.append(ClaimFinding(section=section, claim=bare, cited=cited, support=0.0,
                                             problem="not_reviewed", note=answer))
                continue
            problem, reason = answer
            findings.append(ClaimFinding(section=section, claim=bare, cited=cited,
                                         support=1.0 if problem == "ok" else 0.0, problem=problem, note=reason))
        if problems:
            return SemanticVerdict(reviewer=self.name, passed=False, findings=tuple(findings),
                                   status="could_not_review", detail=problems[0])
        return SemanticVerdict(reviewer=self.name, passed=all(f.problem == "ok" for f in findings),
                               findings=tuple(findings))

    def _ask(self, claim: str, notes: Mapping[str, EvidenceNote]) -> tuple[ClaimProblem, str] | str:
        """The model's (problem, reason) for one claim, or why there is none (a one-line string)."""
        shown = []
        for cid, note in notes.items():
            body = note.text if len(note.text) <= _MAX_NOTE_CHARS else note.text[:_MAX_NOTE_CHARS] + "\n[note cut here]"
            shown.append(f"[E:{cid}]\n{body}")
        request: dict[str, Any] = {
            "model": self._config.model,
            "messages": [{"role": "system", "content": self._system},
                         {"role": "user", "content": "Notes:\n\n" + "\n\n".join(shown) + f"\n\nClaim: {claim}"}],
            "max_tokens": self._max_tokens,
        }
        if self._config.temperature is not None:
            request["temperature"] = self._config.temperature
        if self._config.seed is not None:
            request["seed"] = self._config.seed
        if self._response_format == "json_schema":
            request["response_format"] = {"type": "json_schema", "json_schema": {
                "name": "claim_review", "strict": True, "schema": _ANSWER_SCHEMA}}
        elif self._response_format == "json_object":
            request["response_format"] = {"type": "json_object"}
        status, payload = self._post(json.dumps(request).encode())
        if status != 200:
            return payload
        return self._parse(payload)

    def _post(self, body: bytes) -> tuple[int, str]:
        """(200, the reply's text) or (status, why the endpoint gave none), retrying what may heal."""
        reply = post_chat(self._config, body, transport=self._transport, sleep=self._sleep, mask=self._mask)
        self.calls += reply.attempts
        if reply.status == 200:
            return 200, self._mask(reply.payload.decode("utf-8", "replace"))
        return reply.status, f"endpoint: {reply.problem if reply.status else reply.problem[:200]}"

    def _parse(self, payload: str) -> tuple[ClaimProblem, str] | str:
        try:
            data = json.loads(payload)
            content = data["choices"][0]["message"]["content"]
            usage = data.get("usage") or {}
            total = usage.get("total_tokens") if isinstance(usage, dict) else None
            if isinstance(total, int) and not isinstance(total, bool) and total >= 0:
                self.tokens += total
            if isinstance(content, list):  # the OpenAI list of parts
                content = "".join(str(p.get("text") or "") for p in content if isinstance(p, dict))
            if not isinstance(content, str):
                raise TypeError("content")
        except (ValueError, KeyError, IndexError, TypeError, AttributeError):
            return f"endpoint: HTTP 200 but the reply is not a chat completion: {' '.join(payload.split())[:160]!r}"
        return _answer(content)


def _answer(content: str) -> tuple[ClaimProblem, str] | str:
    """The strict answer: one JSON object (a Markdown code fence around it is tolerated) with a known
    ``verdict`` and a string ``reason``; anything else is a model answer the reviewer could not read."""
    text = _FENCE.sub("", content.strip().removeprefix("\ufeff"))
    try:
        data = json.loads(text)
    except ValueError:
        return f"model: the answer is not JSON: {' '.join(content.split())[:160]!r}"
    if not isinstance(data, dict):
        return f"model: the answer is not a JSON object: {' '.join(content.split())[:160]!r}"
    verdict, reason = data.get("verdict"), data.get("reason", "")
    if not isinstance(verdict, str) or verdict.strip().lower() not in _VERDICTS:
        return f"model: verdict {verdict!r} is not one of {', '.join(_VERDICTS)}"
    if not isinstance(reason, str):
        return f"model: reason is not a string: {reason!r}"[:200]
    problem: ClaimProblem = _VERDICTS[verdict.strip().lower()]
    return problem, " ".join(reason.split())[:300]

