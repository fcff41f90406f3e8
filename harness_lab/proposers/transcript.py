"""Record a proposer's HTTP exchanges with a real endpoint, and replay them without it.

Both classes are a :data:`~harness_lab.proposers.openai_compat.Transport`: pass one to
``OpenAICompatProposer(config, transport=...)``. Only the endpoint is swapped: the proposer builds
its requests, parses the replies, and the run charges, gates and validates exactly as it does live.
What a replay re-uses is the model's bytes, nothing the harness computed from them.

:class:`RecordingTransport` wraps the transport that really talks to the server and keeps every
exchange: the sha256 of the request body as sent, the request JSON, the HTTP status, the reply
bytes as text, and the latency in seconds; a call that raised (connection refused, a deadline) is
kept as the exception's type and message, and raised again. Credentials are never kept: no header is
stored, and every credential the requests' ``Authorization`` (or ``api-key``-style) headers carried
is masked as ``***`` wherever else it appears (a server that echoes the key, whole or cut short: a
:class:`~harness_lab.records.redaction.SecretMask`); ``save`` refuses to
write a file that would still hold one. The file is one JSON document; the request bodies' shared
``tools`` list is stored once, and a request sent again with the same bytes (a retry) refers to the
first.

:class:`TranscriptTransport` answers each call with the next recorded exchange: the recorded status
and bytes, or the recorded exception raised again. It never refuses a call: when a request differs
from the recorded one (the harness changed what it sends: its prompt, its budget cap, a step more or
less), the recorded reply is still returned, and the divergence is kept (``diverged_at``,
``divergences``, :meth:`TranscriptTransport.note`), so a lesson can say that from there on the
replies are not the model's answers to these requests. A call past what was recorded gets HTTP 503
(the replayed endpoint has no answer: the run meets an endpoint failure, never an invented reply).
Given a clock with ``advance`` (a
:class:`~harness_lab.clock.FakeClock`), each replayed call advances it by the recorded latency, so
the run's wall-clock budget sees the time the real call took.

A transcript can be split into named sections (``section(name)``): recording marks where each
begins, replaying moves to that mark, so a divergence in one section does not shift the next.
Standard library only.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import time
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ..records.redaction import SecretMask

__all__ = [
    "TRANSCRIPT_FORMAT",
    "Divergence",
    "Exchange",
    "RecordingTransport",
    "TranscriptTransport",
]

TRANSCRIPT_FORMAT = 1
MASK = "***"

# Header names whose values are credentials: never stored (compared case-insensitively).
_SECRET_HEADERS = frozenset({"authorization", "proxy-authorization", "api-key", "x-api-key", "openai-api-key"})
# Exceptions a transport may raise that a replay raises again by name; anything else is an OSError.
_ERRORS: dict[str, Callable[[str], BaseException]] = {
    cls.__name__: cls for cls in (
        OSError, ConnectionError, ConnectionRefusedError, ConnectionResetError, ConnectionAbortedError,
        BrokenPipeError, TimeoutError,
    )
}
_ERRORS.update({
    "RemoteDisconnected": http.client.RemoteDisconnected,
    "BadStatusLine": http.client.BadStatusLine,
    "HTTPException": http.client.HTTPException,
})

Transport = Callable[[str, bytes, Mapping[str, str], float], tuple[int, bytes]]
_NO_REPLY = b'{"error": {"message": "the transcript has no recorded reply for this request"}}'


class _Advances(Protocol):
    def advance(self, seconds: float) -> None: ...


@dataclass(frozen=True)
class Exchange:
    """One call of a transport: what was asked, what came back, how long it took."""

    index: int
    path: str  # the URL's path (host and port are left out: a recording's port is any free one)
    request_sha256: str  # of the request body's bytes as sent
    request: Any  # the request JSON (the shared tools list as {"$shared": key}; a request made before, with
    # the same bytes, as {"$same_as": its index}); None if not JSON
    status: int | None  # None: the call raised (no HTTP reply)
    reply: str | None  # the reply's bytes as UTF-8 text (base64 when ``reply_base64``)
    latency_s: float
    error: dict[str, str] | None = None  # {"type": ..., "message": ...} when the call raised
    section: str = ""
    reply_base64: bool = False

    @property
    def reply_bytes(self) -> bytes:
        if self.reply is None:
            return b""
        return base64.b64decode(self.reply) if self.reply_base64 else self.reply.encode("utf-8")

    @property
    def usage(self) -> dict[str, Any]:
        """The reply's ``usage`` object (a chat completion's token counts), or {}."""
        if self.status != 200 or self.reply is None or self.reply_base64:
            return {}
        try:
            data = json.loads(self.reply)
        except ValueError:
            return _stream_usage(self.reply)
        usage = data.get("usage") if isinstance(data, dict) else None
        return usage if isinstance(usage, dict) else {}

    @property
    def total_tokens(self) -> int | None:
        total = self.usage.get("total_tokens")
        return total if isinstance(total, int) and not isinstance(total, bool) and total >= 0 else None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "index": self.index, "section": self.section, "path": self.path,
            "request_sha256": self.request_sha256, "request": self.request, "status": self.status,
            "reply": self.reply, "latency_s": self.latency_s,
        }
        if self.reply_base64:
            data["reply_base64"] = True
        if self.error is not None:
            data["error"] = self.error
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Exchange:
        error = data.get("error")
        return cls(index=int(data["index"]), path=str(data.get("path", "")),
                   request_sha256=str(data["request_sha256"]), request=data.get("request"),
                   status=None if data.get("status") is None else int(data["status"]),
                   reply=None if data.get("reply") is None else str(data["reply"]),
                   latency_s=float(data.get("latency_s", 0.0)),
                   error=None if error is None else {"type": str(error.get("type", "OSError")),
                                                     "message": str(error.get("message", ""))},
                   section=str(data.get("section", "")), reply_base64=bool(data.get("reply_base64", False)))


@dataclass(frozen=True)
class Divergence:
    """A replayed call whose request is not the recorded one (or that has no recorded exchange)."""

    index: int  # the call's position in the replay (0-based), = the recorded exchange returned
    section: str
    detail: str  # one line: which request fields differ, or "no recorded exchange left"


def _stream_usage(text: str) -> dict[str, Any]:
    """The last ``usage`` in a server-sent-event stream of chunks, or {}."""
    usage: dict[str, Any] = {}
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("data:") and line[5:].strip() != "[DONE]":
            try:
                chunk = json.loads(line[5:])
            except ValueError:
                continue
            if isinstance(chunk, dict) and isinstance(chunk.get("usage"), dict):
                usage = chunk["usage"]
    return usage


def _credentials(headers: Mapping[str, str]) -> list[str]:
    """The secret parts of credential headers: the whole value and, for 'Bearer KEY', the KEY."""
    found: list[str] = []
    for name, value in headers.items():
        if name.lower() in _SECRET_HEADERS and value:
            found.append(value)
            scheme, _, credential = value.partition(" ")
            if credential.strip():
                found.append(credential.strip())
            elif scheme:
                found.append(scheme)
    return found


def _shared_key(name: str, value: Any) -> str:
    digest = hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    return f"{name}:{digest[:12]}"


class RecordingTransport:
    """Calls ``inner`` and records every exchange (see the module text); never stores a credential."""

    def __init__(self, inner: Transport, *, metadata: Mapping[str, Any] | None = None,
                 secrets: Iterable[str] = (), clock: Callable[[], float] = time.monotonic) -> None:
        self._inner = inner
        self._clock = clock
        self._secrets: set[str] = {s for s in secrets if s}
        self.metadata: dict[str, Any] = dict(metadata or {})
        self.exchanges: list[Exchange] = []
        self.shared: dict[str, Any] = {}
        self.sections: dict[str, int] = {}
        self._section = ""

    def section(self, name: str) -> None:
        """Mark that the exchanges from here on belong to section ``name``."""
        if not name or name in self.sections:
            raise ValueError(f"section: a new, non-empty name, got {name!r} (a recording marks each section once)")
        self.sections[name] = len(self.exchanges)
        self._section = name

    @property
    def latencies(self) -> list[float]:
        return [e.latency_s for e in self.exchanges]

    def __call__(self, url: str, body: bytes, headers: Mapping[str, str], timeout: float) -> tuple[int, bytes]:
        self._secrets.update(_credentials(headers))
        started = self._clock()
        try:
            status, reply = self._inner(url, body, headers, timeout)
        except (OSError, http.client.HTTPException) as exc:
            self._keep(url, body, None, None, self._clock() - started,
                       {"type": type(exc).__name__, "message": str(exc)})
            raise
        self._keep(url, body, status, reply, self._clock() - started, None)
        return status, reply

    def _keep(self, url: str, body: bytes, status: int | None, reply: bytes | None, seconds: float,
              error: dict[str, str] | None) -> None:
        request: Any
        try:
            request = json.loads(body)
        except ValueError:
            request = None
        digest = hashlib.sha256(body).hexdigest()
        same = next((e.index for e in self.exchanges if e.request_sha256 == digest and e.request is not None
                     and "$same_as" not in e.request), None) if isinstance(request, dict) else None
        if same is not None:  # the same bytes as an earlier request (a retry, a step asked again): kept once
            request = {"$same_as": same}
        elif isinstance(request, dict) and isinstance(request.get("tools"), list):
            key = _shared_key("tools", request["tools"])
            self.shared.setdefault(key, request["tools"])
            request = {**request, "tools": {"$shared": key}}
        text, as_base64 = None, False
        if reply is not None:
            try:
                text = reply.decode("utf-8")
            except UnicodeDecodeError:  # masked before encoding: in base64 no mask could find the key
                masked = SecretMask(self._secrets)(reply.decode("latin-1")).encode("latin-1")
                text, as_base64 = base64.b64encode(masked).decode("ascii"), True
        self.exchanges.append(Exchange(
            index=len(self.exchanges), path=urllib.parse.urlsplit(url).path,
            request_sha256=digest, request=request, status=status, reply=text,
            latency_s=round(seconds, 3), error=error, section=self._section, reply_base64=as_base64))

    def to_json(self) -> dict[str, Any]:
        """The transcript as saved: every string with each credential seen masked as ``***``."""
        data = {
            "format": TRANSCRIPT_FORMAT,
            "metadata": self.metadata,
            "sections": self.sections,
            "shared": self.shared,
            "exchanges": [e.to_json() for e in self.exchanges],
        }
        masked: dict[str, Any] = SecretMask(self._secrets).walk(data)
        return masked

    def save(self, path: str | Path) -> Path:
        """Write the transcript as JSON (atomically: a temporary file, then a rename)."""
        target = Path(path)
        text = json.dumps(self.to_json(), ensure_ascii=False, indent=1) + "\n"
        for secret in self._secrets:  # belt and braces: neither the key nor its JSON-escaped form
            if secret in text or json.dumps(secret)[1:-1] in text:
                raise AssertionError("a credential survived masking; transcript not written")
        target.parent.mkdir(parents=True, exist_ok=True)
        scratch = target.with_name(f".{target.name}.tmp")
        scratch.write_text(text, encoding="utf-8")
        scratch.replace(target)
        return target


class TranscriptTransport:
    """Replays a recorded transcript in order: the recorded status and bytes (or exception) for each
    call, whatever was asked; a request that differs from the recorded one is noted, not refused."""

    def __init__(self, source: str | Path | Mapping[str, Any], *, clock: _Advances | None = None) -> None:
        if isinstance(source, Mapping):
            data: Mapping[str, Any] = source
            self.path: Path | None = None
        else:
            self.path = Path(source)
            data = json.loads(self.path.read_text(encoding="utf-8"))
        if data.get("format") != TRANSCRIPT_FORMAT:
            raise ValueError(f"transcript: format {data.get('format')!r}, expected {TRANSCRIPT_FORMAT}")
        self.metadata: dict[str, Any] = dict(data.get("metadata") or {})
        self.shared: dict[str, Any] = dict(data.get("shared") or {})
        self.sections: dict[str, int] = {str(k): int(v) for k, v in (data.get("sections") or {}).items()}
        self.recorded: list[Exchange] = [Exchange.from_json(e) for e in data.get("exchanges") or []]
        self.exchanges: list[Exchange] = []  # the recorded exchanges replayed so far, in order
        self.divergences: list[Divergence] = []
        self._clock = clock
        self._next = 0
        self._section = ""

    @property
    def diverged_at(self) -> int | None:
        """The position of the first replayed call whose request differed from the recording, or None."""
        return self.divergences[0].index if self.divergences else None

    @property
    def latencies(self) -> list[float]:
        """The recorded latencies of the exchanges replayed so far."""
        return [e.latency_s for e in self.exchanges]

    @property
    def remaining(self) -> int:
        return max(0, len(self.recorded) - self._next)

    def section(self, name: str) -> None:
        """Go to the recorded start of section ``name`` (what a recording marked with the same call)."""
        if name not in self.sections:
            raise ValueError(f"section: {name!r} is not in this transcript; it has {sorted(self.sections)}")
        start = self.sections[name]
        if start > self._next:  # (going back is a cell run again: the section replays from its start)
            skipped = start - self._next
            self.divergences.append(Divergence(
                index=len(self.exchanges), section=self._section or name,
                detail=f"the replay made {skipped} call(s) fewer than the recording before section {name!r}"))
        self._next, self._section = start, name

    def expand(self, request: Any) -> Any:
        """A recorded request with its shared parts put back (the JSON that was sent)."""
        if isinstance(request, dict) and set(request) == {"$same_as"}:
            request = self.recorded[int(request["$same_as"])].request
        if isinstance(request, dict) and isinstance(request.get("tools"), dict) and "$shared" in request["tools"]:
            return {**request, "tools": self.shared.get(str(request["tools"]["$shared"]))}
        return request

    def __call__(self, url: str, body: bytes, headers: Mapping[str, str], timeout: float) -> tuple[int, bytes]:
        position = len(self.exchanges)
        recorded = self.recorded[self._next] if self._next < len(self.recorded) else None
        if recorded is None or (self._section and recorded.section != self._section):
            # Nothing recorded for this call: the replayed endpoint has no answer, which the run meets
            # as an endpoint failure (a 503), never as a reply the model did not give.
            where = f"in section {self._section!r}" if self._section else "in the transcript"
            self.divergences.append(Divergence(index=position, section=self._section,
                                               detail=f"no recorded exchange left {where}: answered 503"))
            self.exchanges.append(Exchange(index=-1, path=urllib.parse.urlsplit(url).path,
                                           request_sha256=hashlib.sha256(body).hexdigest(), request=None,
                                           status=503, reply=_NO_REPLY.decode(), latency_s=0.0,
                                           section=self._section))
            return 503, _NO_REPLY
        self._next += 1
        if hashlib.sha256(body).hexdigest() != recorded.request_sha256:
            self.divergences.append(Divergence(index=position, section=self._section,
                                               detail=self._differs(recorded, body, url)))
        self.exchanges.append(recorded)
        if self._clock is not None:
            self._clock.advance(recorded.latency_s)
        if recorded.error is not None:
            make = _ERRORS.get(recorded.error["type"], OSError)
            raise make(recorded.error["message"])
        return int(recorded.status or 0), recorded.reply_bytes

    def _differs(self, recorded: Exchange, body: bytes, url: str) -> str:
        """Which top-level request fields differ (and, for messages, which one)."""
        try:
            sent = json.loads(body)
        except ValueError:
            return "the request is not JSON"
        then = self.expand(recorded.request)
        if not isinstance(sent, dict) or not isinstance(then, dict):
            return "the request differs"
        fields = []
        for key in sorted(set(sent) | set(then)):
            if sent.get(key) != then.get(key):
                if key == "messages" and isinstance(sent.get(key), list) and isinstance(then.get(key), list):
                    which = [i for i, (a, b) in enumerate(zip(sent[key], then[key], strict=False)) if a != b]
                    fields.append(f"messages[{which[0]}]" if which else "messages (count)")
                else:
                    fields.append(key)
        if urllib.parse.urlsplit(url).path != recorded.path:
            fields.append("path")
        return f"request differs from the recording in {', '.join(fields) or 'its bytes'}"

    def note(self) -> str:
        """One line a lesson can print: whether the replay asked what the recording asked."""
        n = len(self.exchanges)
        if not self.divergences:
            return f"replayed {n} recorded exchange(s); every request was byte-identical to the recorded one"
        first = self.divergences[0]
        return (f"replayed {n} recorded exchange(s); call {first.index} ({first.section or 'no section'}) diverged: "
                f"{first.detail}. From there on the replies are the recording's, not the model's answers to "
                f"this run's requests: re-record the transcript")
