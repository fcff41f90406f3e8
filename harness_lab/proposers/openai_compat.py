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
proposal, trace event or checkpoint. What the endpoint sends back passes a
:class:`~harness_lab.records.redaction.SecretMask` of it: an echoed key (whole, cut short, JSON-escaped) becomes
``***`` in reply text, tool-call names and arguments, and error text, however the key was given.
    HARNESS_LAB_OPENAI_MAX_TOKENS  reply cap (default 512; also capped by the run's token budget left)
    HARNESS_LAB_OPENAI_TOOL_CHOICE auto | required | none | omit (default auto: llama-cpp-python's
                                   server answers "required" with HTTP 500)
    HARNESS_LAB_OPENAI_TIMEOUT     seconds for one whole call (default 60)
    HARNESS_LAB_OPENAI_STREAM      1 to ask for a server-sent-event stream

Token usage reported by the endpoint (``usage.total_tokens``) is what the run's budget is charged.
Failures are told apart by whose they are:

* the **endpoint's** (no reply, a timeout, HTTP 5xx/408/409/429, a wrong key, an unknown model, a reply
  that is no chat completion): retried ``max_retries`` times with backoff inside one call, then an
  :class:`~harness_lab.proposers.base.EndpointFailure`: the run records it as an endpoint event, never
  shows it to the model, charges no decision, and waits for the endpoint after a few in a row;
* the **model's** (prose instead of a tool call, arguments that are not JSON, a reply cut off at the
  token limit): an error text the runtime refuses and feeds back, as for any malformed proposal.

``timeout_s`` bounds the whole call (connect, send, first byte, every byte after), not one socket read:
a server that drips a byte every half second cannot hold a step longer than the deadline.
"""

from __future__ import annotations

import http.client
import json
import os
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from ..context import ContextView
from ..errors import ConfigError
from ..records.redaction import SecretMask
from ..records.tool_specs import TOOL_SCHEMAS
from ._counts import whole_count
from .base import EndpointFailure, ProposerOutput

__all__ = ["ENV_PREFIX", "MAX_REPLY_BYTES", "TOOL_SCHEMAS", "ChatReply", "OpenAICompatConfig", "OpenAICompatProposer", "ToolChoice", "Transport", "post_chat",
           "urllib_transport"]

ToolChoice = Literal["auto", "required", "none"]

ENV_PREFIX = "HARNESS_LAB_OPENAI_"
# A reply past this is an endpoint failure, not read on: a server that streams without end would fill
# the harness's memory before the deadline (a tool call is kilobytes; a report, at most 4 MiB).
MAX_REPLY_BYTES = 64 << 20
# (status, body) for a JSON POST, the last argument the whole call's deadline in seconds; swapped out
# by tests or callers with their own HTTP stack.
Transport = Callable[[str, bytes, Mapping[str, str], float], tuple[int, bytes]]

_SYSTEM = (
    "You are the proposer inside an agent harness. You only propose: call exactly one tool per turn. "
    "The runtime decides whether it runs, validates your report against the task contract when you call "
    "finish, and feeds failures back. Claims such as 'verified' are recorded and never trusted."
)


_CUT = "the reply was cut off at the output token limit (finish_reason 'length')"
# Statuses after which asking again may work; any other 4xx will not heal by asking again.
_RETRY_STATUSES = frozenset({0, 408, 409, 425, 429})
_MIN_REPLY_TOKENS = 32  # room for one short tool call (finish, a read) when the budget is nearly spent


@dataclass(frozen=True)
class OpenAICompatConfig:
    base_url: str
    model: str
    api_key: str | None = field(default=None, repr=False)
    timeout_s: float = 60.0  # the whole call: connect, send, first byte and every byte after
    max_retries: int = 2
    temperature: float | None = 0.0
    # Sent with every request (servers' own defaults may generate for minutes); capped further by what
    # is left of the run's token budget. None: not sent.
    max_tokens: int | None = 512
    tool_choice: ToolChoice | None = "auto"  # None: not sent
    stream: bool = False  # ask for server-sent events (the reply is assembled before it is parsed)
    seed: int | None = None  # a sampling seed, for servers that take one (repeatable runs at temperature > 0)

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
        if self.max_tokens is not None and (isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int)
                                            or self.max_tokens < 1):
            raise ConfigError(f"{ENV_PREFIX}MAX_TOKENS: a whole number >= 1, got {self.max_tokens!r}")
        if self.tool_choice is not None and self.tool_choice not in get_args(ToolChoice):
            raise ConfigError(f"{ENV_PREFIX}TOOL_CHOICE: one of {', '.join(get_args(ToolChoice))} or omit, "
                              f"got {self.tool_choice!r}")
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
        extra: dict[str, Any] = {}
        if (text := source.get(f"{ENV_PREFIX}MAX_TOKENS", "").strip()):
            extra["max_tokens"] = _whole(f"{ENV_PREFIX}MAX_TOKENS", text)
        if (text := source.get(f"{ENV_PREFIX}TOOL_CHOICE", "").strip()):
            extra["tool_choice"] = None if text == "omit" else text
        if (text := source.get(f"{ENV_PREFIX}TIMEOUT", "").strip()):
            try:
                extra["timeout_s"] = float(text)
            except ValueError:
                raise ConfigError(f"{ENV_PREFIX}TIMEOUT: seconds as a number, got {text!r}") from None
        if (text := source.get(f"{ENV_PREFIX}STREAM", "").strip()):
            if text.lower() not in ("0", "1", "true", "false", "yes", "no"):
                raise ConfigError(f"{ENV_PREFIX}STREAM: 1 or 0, got {text!r}")
            extra["stream"] = text.lower() in ("1", "true", "yes")
        return cls(base_url=source[f"{ENV_PREFIX}BASE_URL"].rstrip("/"), model=source[f"{ENV_PREFIX}MODEL"],
                   api_key=source.get(f"{ENV_PREFIX}API_KEY", "").strip() or None,  # a key file's newline
                   **extra)


def _whole(name: str, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ConfigError(f"{name}: a whole number, got {text!r}") from None


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
    """POST ``body``; ``timeout`` bounds the whole exchange, not each socket read (``http.client``'s
    timeout restarts with every byte, so a server dripping bytes could hold a call for ever)."""
    deadline = time.monotonic() + timeout
    parts = urllib.parse.urlsplit(url)
    conn_type = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = conn_type(parts.hostname or "", parts.port, timeout=timeout)
    try:
        conn.request("POST", parts.path + (f"?{parts.query}" if parts.query else ""), body=body, headers=dict(headers))
        _left(conn, deadline)
        response = conn.getresponse()
        chunks: list[bytes] = []
        size = 0
        while True:
            _left(conn, deadline)
            chunk = response.read1(65536)
            if not chunk:
                if response.length:  # the server closed before the Content-Length it announced
                    raise http.client.IncompleteRead(b"".join(chunks), response.length)
                return int(response.status), b"".join(chunks)
            size += len(chunk)
            if size > MAX_REPLY_BYTES:
                raise http.client.HTTPException(f"the reply is over {MAX_REPLY_BYTES >> 20} MiB; not read further")
            chunks.append(chunk)
    finally:
        conn.close()


def _left(conn: http.client.HTTPConnection, deadline: float) -> None:
    """Give the next socket operation only what is left of the call's deadline."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("the call's deadline passed")
    if conn.sock is not None:
        conn.sock.settimeout(left)


@dataclass(frozen=True)
class ChatReply:
    """What :func:`post_chat` got: ``status`` 200 and the reply's bytes, or the last status (0: no reply) and
    ``problem``, one masked line; ``attempts``: the calls made."""

    status: int
    payload: bytes
    problem: str
    attempts: int


def post_chat(config: OpenAICompatConfig, body: bytes, *, transport: Transport, sleep: Callable[[float], None],
              mask: SecretMask) -> ChatReply:
    """POST ``body`` to the endpoint's chat completions, retrying what may heal (no reply, 408/409/425/429,
    5xx) with backoff; the one HTTP loop of the proposer and the model reviewer."""
    headers = {"Content-Type": "application/json"}
    if config.api_key:
        headers["Authorization"] = f"Bearer {config.api_key}"
    url = f"{config.base_url}/chat/completions"
    attempt, problem, status = 0, "", 0
    for attempt in range(config.max_retries + 1):
        try:
            status, payload = transport(url, body, headers, config.timeout_s)
        except (OSError, http.client.HTTPException) as exc:  # no reply, a deadline, or bytes that are not HTTP
            status, payload = 0, (f"no reply within {config.timeout_s:g}s" if isinstance(exc, TimeoutError)
                                  else f"{type(exc).__name__}: {exc}").encode()
        if status == 200:
            return ChatReply(200, payload, "", attempt + 1)
        # Masked before it is cut short: a cut through the key would leave a part the mask cannot find.
        text = mask(payload.decode("utf-8", "replace"))
        problem = f"HTTP {status}: {' '.join(text.split())[:200]}" if status else text
        if status not in _RETRY_STATUSES and status < 500:
            break  # a client error (a wrong key, an unknown model or path) will not heal by asking again
        if attempt < config.max_retries:
            sleep(min(2.0**attempt * 0.5, 8.0))
    return ChatReply(status, b"", mask(problem), attempt + 1)


class OpenAICompatProposer:
    """Maps each context view to one chat-completions call; the first tool call is the proposal."""

    def __init__(self, config: OpenAICompatConfig, *, transport: Transport | None = None,
                 system_prompt: str = _SYSTEM, sleep: Callable[[float], None] = time.sleep) -> None:
        self._config = config
        self._transport: Transport = transport or urllib_transport
        self._system = system_prompt
        self._sleep = sleep
        self._mask = SecretMask([config.api_key] if config.api_key else [])
        self.calls = 0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> OpenAICompatProposer:
        return cls(OpenAICompatConfig.from_env(env))

    def __repr__(self) -> str:
        return f"OpenAICompatProposer(base_url={self._config.base_url!r}, model={self._config.model!r})"

    @property
    def model(self) -> str:
        return self._config.model

    def propose(self, view: ContextView) -> ProposerOutput | EndpointFailure:
        reply = post_chat(self._config, json.dumps(self._request(view)).encode(), transport=self._transport,
                          sleep=self._sleep, mask=self._mask)
        self.calls += reply.attempts
        if reply.status == 200:
            return self._parse(self._unstream(reply.payload) if self._config.stream else reply.payload, reply.attempts)
        retryable = reply.status in _RETRY_STATUSES or reply.status >= 500
        return EndpointFailure(reason=reply.problem, status=reply.status or None, attempts=reply.attempts,
                               retryable=retryable)

    def _request(self, view: ContextView) -> dict[str, Any]:
        request: dict[str, Any] = {
            "model": self._config.model,
            "messages": [{"role": "system", "content": self._system}, {"role": "user", "content": view.render()}],
            "tools": list(TOOL_SCHEMAS),
        }
        if self._config.tool_choice is not None:
            request["tool_choice"] = self._config.tool_choice
        if self._config.temperature is not None:
            request["temperature"] = self._config.temperature
        if self._config.seed is not None:
            request["seed"] = self._config.seed
        if (cap := self._max_tokens(view)) is not None:
            request["max_tokens"] = cap
        if self._config.stream:
            request["stream"] = True
            request["stream_options"] = {"include_usage": True}  # the usage the budget is charged
        return request

    def _max_tokens(self, view: ContextView) -> int | None:
        """The configured cap, lowered to what the run's token budget has left after this prompt."""
        cap = self._config.max_tokens
        left: int | None = getattr(view, "tokens_left", None)  # a caller's own view may not tell
        if left is None:
            return cap
        # The prompt is charged too (the endpoint's total); when it alone takes what is left, a short reply
        # may still finish the task and the next step's budget check stops the run.
        room = max(_MIN_REPLY_TOKENS, left - view.total_tokens)
        return room if cap is None else min(cap, room)

    @staticmethod
    def _unstream(payload: bytes) -> bytes:
        """A server-sent-event stream of chat-completion chunks as the one completion they add up to
        (text, tool calls by index with their argument pieces, finish reason, usage); a body that is
        no event stream is returned as it is, for _parse to judge."""
        try:
            return OpenAICompatProposer._assemble(payload.decode("utf-8", "replace")) or payload
        except (ValueError, TypeError, AttributeError):  # a stream of the wrong shape: _parse says so
            return payload

    @staticmethod
    def _assemble(text: str) -> bytes | None:
        if "data:" not in text:
            return None
        content: list[str] = []
        # Each call's name and argument pieces, joined at the end: a stream sends a long argument a few
        # characters per event, and adding each piece to the string so far copied it again (quadratic:
        # 160k pieces, 57 s).
        calls: dict[int, tuple[list[str], list[str]]] = {}
        finish, usage = None, None
        for line in text.splitlines():
            line = line.strip()
            if not line.startswith("data:") or line[5:].strip() == "[DONE]":
                continue
            try:
                chunk = json.loads(line[5:])
            except ValueError:
                return None
            if not isinstance(chunk, dict):
                return None
            usage = chunk.get("usage") or usage
            for choice in chunk.get("choices") or []:
                if not isinstance(choice, dict):
                    return None
                finish = choice.get("finish_reason") or finish
                delta = choice.get("delta") or {}
                if isinstance(delta.get("content"), str):
                    content.append(delta["content"])
                for piece in delta.get("tool_calls") or []:
                    if not isinstance(piece, dict):
                        return None
                    names, arguments = calls.setdefault(int(piece.get("index", len(calls))), ([], []))
                    function = piece.get("function") or {}
                    names.append(str(function.get("name") or ""))
                    arguments.append(str(function.get("arguments") or ""))
        message: dict[str, Any] = {"role": "assistant", "content": "".join(content)}
        if calls:
            message["tool_calls"] = [{"function": {"name": "".join(calls[i][0]), "arguments": "".join(calls[i][1])}}
                                     for i in sorted(calls)]
        whole: dict[str, Any] = {"choices": [{"message": message, "finish_reason": finish}]}
        if usage is not None:
            whole["usage"] = usage
        return json.dumps(whole).encode()

    def _parse(self, payload: bytes, attempts: int = 1) -> ProposerOutput | EndpointFailure:
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
            # The server's fault, not the model's: nothing to feed back to it.
            return EndpointFailure(reason=self._mask(f"HTTP 200 but the reply is not a chat completion: {text!r}"),
                                   status=200, attempts=attempts)
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
        # A key the endpoint echoed into a call (its arguments, its name) is masked like one in its text.
        if len(calls) > 1:  # one action per step: the first runs; the others become claims the trace records
            others = [c.get("function", c) if isinstance(c, dict) else c for c in calls[1:]]
            return ProposerOutput(raw=self._mask.walk({**args, "other_tool_calls": others, "kind": name}),
                                  tokens=tokens)
        return ProposerOutput(raw=self._mask.walk({**args, "kind": name}), tokens=tokens)
