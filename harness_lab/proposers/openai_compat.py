"""A proposer for any OpenAI-compatible chat-completions endpoint with tool calling.

Hosted services and local servers (Ollama, vLLM, llama.cpp's server) speak the same protocol:
``POST {base_url}/chat/completions`` with ``messages`` and ``tools``; the reply's first tool call
becomes the raw proposal ``{"kind": <function name>, **arguments}``, which the runtime parses and
decides on like any other. Further calls in the same reply are not run: they ride along as
``other_tool_calls``, a claim the trace records (a ``claims_ignored`` note), never dropped unseen. Standard library only (urllib): the ``openai`` extra needs no package.

Configuration comes from the environment (:meth:`OpenAICompatConfig.from_env`)::

    HARNESS_LAB_OPENAI_BASE_URL   e.g. http://127.0.0.1:11434/v1   (required)
    HARNESS_LAB_OPENAI_MODEL      e.g. qwen2.5:7b                   (required)
    HARNESS_LAB_OPENAI_API_KEY    bearer token                      (optional for local servers)

The key is sent in the ``Authorization`` header and nowhere else: it is not in any repr, state,
proposal, trace event or checkpoint, and it is masked in error text an endpoint echoes back.
Token usage reported by the endpoint (``usage.total_tokens``) is what the run's budget is charged.
An endpoint failure is data, not a crash: after ``max_retries`` the proposal is an error string the
runtime feeds back as a malformed proposal, so the loop gates still decide when to stop.
"""

from __future__ import annotations

import http.client
import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..context import ContextView
from ..errors import ConfigError
from ._counts import whole_count
from .base import ProposerOutput

__all__ = ["ENV_PREFIX", "TOOL_SCHEMAS", "OpenAICompatConfig", "OpenAICompatProposer", "Transport", "urllib_transport"]

ENV_PREFIX = "HARNESS_LAB_OPENAI_"
# (status, body) for a JSON POST; swapped out by tests or callers with their own HTTP stack.
Transport = Callable[[str, bytes, Mapping[str, str], float], tuple[int, bytes]]

_SYSTEM = (
    "You are the proposer inside an agent harness. You only propose: call exactly one tool per turn. "
    "The runtime decides whether it runs, validates your report against the task contract when you call "
    "finish, and feeds failures back. Claims such as 'verified' are recorded and never trusted."
)


def _fn(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": properties, "required": required, "additionalProperties": False}}}


_STR = {"type": "string"}
_CUT = "the reply was cut off at the output token limit (finish_reason 'length')"
TOOL_SCHEMAS: tuple[dict[str, Any], ...] = (
    _fn("read_evidence", "Read one evidence note by id.", {"id": _STR}, ["id"]),
    _fn("write_report", "Write the whole report (Markdown) to the report path.", {"text": _STR}, ["text"]),
    _fn("finish", "Ask the runtime to validate the report and end the task.", {}, []),
    _fn("list_dir", "List a workspace directory.", {"path": _STR}, []),
    _fn("read_file", "Read a workspace file.", {"path": _STR}, ["path"]),
    _fn("write_file", "Write a workspace file.", {"path": _STR, "content": _STR}, ["path", "content"]),
    _fn("read_ref", "Read part of a large stored output by reference.",
        {"ref": _STR, "start": {"type": "integer"}, "end": {"type": "integer"}}, ["ref"]),
    _fn("think", "Write a thought down (no side effect); it stays in the context.", {"thought": _STR}, ["thought"]),
    _fn("run_command", "Run a command in the sandbox.",
        {"argv": {"type": "array", "items": _STR}, "timeout": {"type": "number"}}, ["argv"]),
)


@dataclass(frozen=True)
class OpenAICompatConfig:
    base_url: str
    model: str
    api_key: str | None = field(default=None, repr=False)
    timeout_s: float = 60.0
    max_retries: int = 2
    temperature: float | None = 0.0

    def __post_init__(self) -> None:
        # The endpoint path is appended with a "/": a trailing one here would make "//chat/completions".
        object.__setattr__(self, "base_url", self.base_url.rstrip("/"))
        if not self.base_url.startswith(("http://", "https://")):
            raise ConfigError(f"{ENV_PREFIX}BASE_URL: {self.base_url!r} is not an http(s) URL")
        if problem := _url_problem(self.base_url):
            raise ConfigError(f"{ENV_PREFIX}BASE_URL: {self.base_url!r} {problem}")
        if not self.timeout_s > 0:
            raise ConfigError(f"timeout_s: must be > 0 seconds, got {self.timeout_s}")
        if self.max_retries < 0:
            raise ConfigError(f"max_retries: must be >= 0, got {self.max_retries}")
        if not self.model:
            raise ConfigError(f"{ENV_PREFIX}MODEL: empty model name")
        if self.api_key is not None and not all("!" <= c <= "~" for c in self.api_key):
            # http.client refuses such a header value with an error quoting it: the key would reach the trace.
            raise ConfigError(f"{ENV_PREFIX}API_KEY: contains whitespace, a control or a non-ASCII character "
                              "(it goes into an HTTP header; the value is not shown)")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> OpenAICompatConfig:
        source = os.environ if env is None else env
        missing = [f"{ENV_PREFIX}{n}" for n in ("BASE_URL", "MODEL") if not source.get(f"{ENV_PREFIX}{n}")]
        if missing:
            raise ConfigError(f"environment: {', '.join(missing)} not set (the OpenAI-compatible proposer needs them)")
        return cls(base_url=source[f"{ENV_PREFIX}BASE_URL"].rstrip("/"), model=source[f"{ENV_PREFIX}MODEL"],
                   api_key=source.get(f"{ENV_PREFIX}API_KEY", "").strip() or None)  # a key file's newline


def _url_problem(url: str) -> str:
    """Why urllib could not send to ``url`` (told at configuration, not at the first step), or ''."""
    if any(c.isspace() or ord(c) < 32 for c in url):
        return "contains whitespace or a control character"
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in range
    except ValueError as exc:
        return f"is not a valid URL: {exc}"
    return "" if parts.hostname else "names no host"


def _text(content: Any) -> str:
    """A message's text: a string, or the OpenAI list of parts (``[{"type": "text", "text": ...}]``) joined."""
    if isinstance(content, list):
        return "".join(str(p.get("text") or "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return str(content or "")


def urllib_transport(url: str, body: bytes, headers: Mapping[str, str], timeout: float) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, headers=dict(headers), method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - URL is configured
            return int(response.status), bytes(response.read())
    except urllib.error.HTTPError as exc:
        return int(exc.code), bytes(exc.read() or b"")


class OpenAICompatProposer:
    """Maps each context view to one chat-completions call; the first tool call is the proposal."""

    def __init__(self, config: OpenAICompatConfig, *, transport: Transport | None = None,
                 system_prompt: str = _SYSTEM, sleep: Callable[[float], None] = time.sleep) -> None:
        self._config = config
        self._transport: Transport = transport or urllib_transport
        self._system = system_prompt
        self._sleep = sleep
        self.calls = 0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> OpenAICompatProposer:
        return cls(OpenAICompatConfig.from_env(env))

    def __repr__(self) -> str:
        return f"OpenAICompatProposer(base_url={self._config.base_url!r}, model={self._config.model!r})"

    @property
    def model(self) -> str:
        return self._config.model

    def propose(self, view: ContextView) -> ProposerOutput:
        body = json.dumps(self._request(view)).encode()
        headers = {"Content-Type": "application/json"}
        if self._config.api_key:
            headers["Authorization"] = f"Bearer {self._config.api_key}"
        url = f"{self._config.base_url}/chat/completions"
        problem = ""
        for attempt in range(self._config.max_retries + 1):
            self.calls += 1
            try:
                status, payload = self._transport(url, body, headers, self._config.timeout_s)
            except (OSError, http.client.HTTPException) as exc:  # no reply, or bytes that are not HTTP
                status, payload = 0, f"{type(exc).__name__}: {exc}".encode()
            if status == 200:
                return self._parse(payload)
            # Masked before it is cut short: a cut through the key would leave a part the mask cannot find.
            problem = f"HTTP {status}: {self._mask(payload.decode('utf-8', 'replace'))[:200]}" if status else payload.decode()
            if status not in (0, 408, 409, 429) and status < 500:
                break  # a client error will not heal by asking again
            if attempt < self._config.max_retries:
                self._sleep(min(2.0**attempt * 0.5, 8.0))
        return ProposerOutput(raw=self._mask(f"endpoint error, no proposal: {problem}"), tokens=0)

    def _request(self, view: ContextView) -> dict[str, Any]:
        request: dict[str, Any] = {
            "model": self._config.model,
            "messages": [{"role": "system", "content": self._system}, {"role": "user", "content": view.render()}],
            "tools": list(TOOL_SCHEMAS),
            "tool_choice": "required",
        }
        if self._config.temperature is not None:
            request["temperature"] = self._config.temperature
        return request

    def _parse(self, payload: bytes) -> ProposerOutput:
        try:
            data = json.loads(payload)
            choice = data["choices"][0]
            message, cut = choice["message"], choice.get("finish_reason") == "length"
            calls = message.get("tool_calls") or []
            function = (calls[0].get("function") or {}) if calls else {}
            if not isinstance(calls, list) or not isinstance(function, dict):
                raise TypeError("tool_calls")
        except (ValueError, KeyError, IndexError, TypeError, AttributeError):
            text = self._mask(payload.decode("utf-8", "replace"))[:200]
            return ProposerOutput(raw=self._mask(f"endpoint reply is not a chat completion: {text!r}"), tokens=0)
        usage = data.get("usage")
        usage = usage if isinstance(usage, dict) else {}
        tokens = whole_count(usage.get("total_tokens"))
        if tokens is None:
            parts = [whole_count(usage.get("prompt_tokens")), whole_count(usage.get("completion_tokens"))]
            tokens = parts[0] + parts[1] if parts[0] is not None and parts[1] is not None else None
        if not calls:  # prose instead of a tool call: the runtime answers with a malformed-proposal error
            content = _text(message.get("content"))
            return ProposerOutput(raw=self._mask(f"{_CUT}, before any tool call: {content}" if cut else content),
                                  tokens=tokens)
        name, arguments = function.get("name"), function.get("arguments") or "{}"
        try:
            # json.loads refuses a leading byte order mark, which some servers' encoders write
            args = json.loads(arguments.removeprefix("\ufeff")) if isinstance(arguments, str) else arguments
        except ValueError:
            if cut:  # the model ran out of output tokens mid-call: say so, "not JSON" would blame the wrong thing
                return ProposerOutput(raw=self._mask(f"{_CUT}, inside the arguments of tool call {name!r}: "
                                                     "propose something shorter"), tokens=tokens)
            return ProposerOutput(raw=self._mask(f"tool call {name!r} arguments are not JSON: {self._mask(arguments)[:200]}"),
                                  tokens=tokens)
        if not isinstance(args, dict):
            return ProposerOutput(raw=self._mask(f"tool call {name!r} arguments are not an object"), tokens=tokens)
        if len(calls) > 1:  # one action per step: the first runs; the others become claims the trace records
            others = [c.get("function", c) if isinstance(c, dict) else c for c in calls[1:]]
            return ProposerOutput(raw={**args, "other_tool_calls": others, "kind": name}, tokens=tokens)
        return ProposerOutput(raw={**args, "kind": name}, tokens=tokens)

    def _mask(self, text: str) -> str:
        key = self._config.api_key
        return text.replace(key, "***") if key else text
