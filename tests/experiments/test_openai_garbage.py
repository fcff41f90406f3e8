"""The OpenAI-compatible proposer against a server that answers garbage (a raw 127.0.0.1 socket).

An endpoint failure is data, not a crash (the module's promise): whatever bytes come back, ``propose``
returns a proposal the runtime can refuse, and an endpoint cannot credit the budget with negative tokens.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from harness_lab.errors import ConfigError
from harness_lab.proposers import EndpointFailure
from harness_lab.proposers.openai_compat import OpenAICompatConfig, OpenAICompatProposer

KEY = "sk-test-DO-NOT-LEAK-77aa"


class _View:
    def render(self) -> str:
        return "context"


def _http(body: Any) -> bytes:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(data), data)


def _read_request(conn: socket.socket) -> None:
    """Reads the whole request, headers and Content-Length body.

    http.client sends the body in a second send(); closing with it unread makes the kernel answer with
    RST instead of FIN, and the client then sees ConnectionResetError instead of the reply under test.
    """
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(1 << 16)
        if not chunk:
            return
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), 0)
    while len(body) < length:
        chunk = conn.recv(1 << 16)
        if not chunk:
            return
        body += chunk


@pytest.fixture
def raw_server() -> Iterator[list[bytes]]:
    """Answers every connection with the next queued bytes (then closes); yields the queue and its URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    replies: list[bytes] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            with conn:
                _read_request(conn)
                conn.sendall(replies.pop(0) if replies else b"")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    replies.append(f"http://127.0.0.1:{sock.getsockname()[1]}/v1".encode())
    yield replies
    try:
        sock.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept(); close() alone does not
    except OSError:
        pass
    sock.close()
    thread.join(timeout=5)


def _propose(raw_server: list[bytes], reply: bytes, retries: int = 0) -> tuple[Any, int | None, int]:
    url = raw_server.pop(0).decode()
    raw_server[:] = [reply] * (retries + 1)
    proposer = OpenAICompatProposer(OpenAICompatConfig(base_url=url, model="m", api_key=KEY, timeout_s=5,
                                                       max_retries=retries), sleep=lambda s: None)
    out = proposer.propose(_View())  # type: ignore[arg-type]
    if isinstance(out, EndpointFailure):  # the endpoint's fault: its reason, nothing to charge
        return out, None, proposer.calls
    return out.raw, out.tokens, proposer.calls


@pytest.mark.parametrize(("reply", "says"), [
    (b"hello, not http\r\n\r\n", "BadStatusLine"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"choices\"", "IncompleteRead"),
    (_http({"choices": [{"message": "hi"}]}), "not a chat completion"),
    (_http({"choices": [{"message": {"content": "x"}}], "usage": 5}), ""),
    (_http({"choices": [{"message": {"tool_calls": {"a": 1}}}]}), "not a chat completion"),
    (_http({"choices": [{"message": {"tool_calls": ["x"]}}]}), "not a chat completion"),
    (_http({"choices": [{"message": {"tool_calls": [{"function": "think"}]}}]}), "not a chat completion"),
])
def test_garbage_from_the_endpoint_is_an_endpoint_failure(raw_server: list[bytes], reply: bytes, says: str) -> None:
    out, tokens, _ = _propose(raw_server, reply)
    if says:  # the server's fault: an EndpointFailure, never a proposal the model is blamed for
        assert isinstance(out, EndpointFailure) and says in out.reason and KEY not in out.reason
    else:  # a chat completion with prose and no tool call: the model's text, refused by the runtime later
        assert out == "x"
    assert tokens in (0, None)


def test_a_garbage_transport_reply_is_retried_like_a_dropped_connection(raw_server: list[bytes]) -> None:
    out, _, calls = _propose(raw_server, b"garbage\r\n\r\n", retries=2)
    assert calls == 3 and isinstance(out, EndpointFailure) and out.attempts == 3 and out.status is None


@pytest.mark.parametrize("total", [-500, True, 1.5, "12"])
def test_reported_usage_that_is_not_a_count_is_not_charged(raw_server: list[bytes], total: object) -> None:
    # None: the run falls back to its own counter; a negative count would credit the token budget.
    _, tokens, _ = _propose(raw_server, _http({"choices": [{"message": {"content": "x"}}],
                                               "usage": {"total_tokens": total}}))
    assert tokens is None


def test_negative_prompt_and_completion_counts_are_not_charged(raw_server: list[bytes]) -> None:
    _, tokens, _ = _propose(raw_server, _http({"choices": [{"message": {"content": "x"}}],
                                               "usage": {"prompt_tokens": -900, "completion_tokens": 3}}))
    assert tokens is None


@pytest.mark.parametrize("url", ["http://", "https:///v1", "http://exa mple/v1", "http://h:99999/v1", "http://h:port/v1"])
def test_a_base_url_without_a_usable_host_is_a_config_error(url: str) -> None:
    with pytest.raises(ConfigError, match="HARNESS_LAB_OPENAI_BASE_URL"):
        OpenAICompatConfig.from_env({"HARNESS_LAB_OPENAI_BASE_URL": url, "HARNESS_LAB_OPENAI_MODEL": "m"})


@pytest.mark.parametrize(("field", "value"), [("timeout_s", 0.0), ("timeout_s", -1.0), ("max_retries", -1)])
def test_timeout_and_retries_are_checked_at_configuration(field: str, value: float) -> None:
    # A negative timeout was a ValueError out of the first step; max_retries=-1 made no call at all
    # and every step an "endpoint error" with no reason.
    with pytest.raises(ConfigError, match=rf"{field}: must be"):
        OpenAICompatConfig(base_url="http://127.0.0.1:1/v1", model="m", **{field: value})  # type: ignore[arg-type]
