"""STAND-IN, not a model: a chat-completions server on 127.0.0.1 that answers from a fixed script of
replies (prose, tool calls, a cut-off call, a finish, repeats), each with a usage count derived from the
request. Used to check that recording a conversation and replaying it give the same run.

    python tests/standin_chat.py [PORT]    # serve until killed (prints its base URL)
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Mapping
from typing import Any

from jsonpost import JsonPostServer

KEY = "sk-standin-DO-NOT-LEAK-9b7e"


def _call(name: str, arguments: str, finish: str = "tool_calls") -> dict[str, Any]:
    return {"finish_reason": finish, "message": {"role": "assistant", "content": "",
                                                 "tool_calls": [{"type": "function", "id": f"call-{name}",
                                                                 "function": {"name": name, "arguments": arguments}}]}}


# What the stand-in "model" says, in order, then again from the top.
SCRIPT: list[dict[str, Any]] = [
    {"finish_reason": "length", "message": {"role": "assistant", "content": "[L0 | round 0 | from harness ..."}},
    _call("finish", "{}"),
    _call("read_evidence", '{"id": "harness-boundary"}'),
    _call("list_dir", '{"path": "notes"}'),
    _call("list_dir", '{"path": "notes"}'),
    _call("list_dir", '{"path": "notes"}'),
    _call("list_dir", '{"path": "notes/a.json.json.json', finish="length"),
    _call("read_evidence", '{"id": "budget-gates"}'),
    _call("list_dir", '{"path": "notes"}'),
    _call("list_dir", '{"path": "notes"}'),
]


class StandInChat(JsonPostServer):
    """``with StandInChat() as s: s.url``; ``s.requests`` keeps every request body it saw (parsed)."""

    def __init__(self, port: int = 0, key: str | None = KEY) -> None:
        self.requests: list[dict[str, Any]] = []
        self.calls = 0
        self._key = key
        super().__init__(self._answer, port)

    def _answer(self, path: str, headers: Mapping[str, str], body: bytes) -> tuple[int, Any]:
        if self._key is not None and headers.get("Authorization") != f"Bearer {self._key}":
            return 401, {"error": {"message": "invalid api key"}}
        request = json.loads(body)
        self.requests.append(request)
        choice = SCRIPT[self.calls % len(SCRIPT)]
        self.calls += 1
        prompt = len(json.dumps(request["messages"])) // 4
        completion = min(int(request.get("max_tokens") or 160), 20 + self.calls % 7)
        return 200, {"id": f"standin-{self.calls}", "object": "chat.completion", "model": request["model"],
                     "choices": [{"index": 0, **choice}],
                     "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                               "total_tokens": prompt + completion}}

    def __enter__(self) -> StandInChat:
        self.start()
        return self


if __name__ == "__main__":
    with StandInChat(int(sys.argv[1]) if len(sys.argv) > 1 else 0) as s:
        print(s.url, flush=True)
        threading.Event().wait()
