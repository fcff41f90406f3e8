"""What the model tests record of the real server's replies."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from harness_lab.proposers.openai_compat import urllib_transport


@dataclass
class Reply:
    status: int
    payload: bytes
    seconds: float

    def json(self) -> dict[str, Any]:
        data = json.loads(self.payload)
        assert isinstance(data, dict)
        return data

    @property
    def total_tokens(self) -> int:
        if self.status != 200:
            return 0
        usage = self.json().get("usage") or {}
        return int(usage.get("total_tokens") or 0)

    @property
    def tool_calls(self) -> list[dict[str, Any]]:
        if self.status != 200:
            return []
        return list(self.json()["choices"][0]["message"].get("tool_calls") or [])


@dataclass
class RecordingTransport:
    """The proposer's own HTTP transport, keeping every reply the server gave and how long it took."""

    replies: list[Reply] = field(default_factory=list)

    def __call__(self, url: str, body: bytes, headers: Mapping[str, str], *args: Any, **kwargs: Any) -> tuple[int, bytes]:
        started = time.monotonic()
        try:
            status, payload = urllib_transport(url, body, headers, *args, **kwargs)
        except BaseException as exc:  # no reply (a timeout, a refused connection): recorded as status 0
            self.replies.append(Reply(0, f"{type(exc).__name__}: {exc}".encode(), time.monotonic() - started))
            raise
        self.replies.append(Reply(status, payload, time.monotonic() - started))
        return status, payload
