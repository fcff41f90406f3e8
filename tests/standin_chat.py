"""STAND-IN, not a model: a chat-completions server on 127.0.0.1 that answers from a fixed script of
replies (prose, tool calls, a cut-off call, a finish, repeats), each with a usage count derived from the
request. Used to check that recording a conversation and replaying it give the same run.

    python tests/standin_chat.py [PORT]    # serve until killed (prints its base URL)
"""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

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


class StandInChat:
    """``with StandInChat() as s: s.url``; ``s.requests`` keeps every request body it saw (parsed)."""

    def __init__(self, port: int = 0, key: str | None = KEY) -> None:
        self.requests: list[dict[str, Any]] = []
        self.calls = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if key is not None and self.headers.get("Authorization") != f"Bearer {key}":
                    self._send(401, {"error": {"message": "invalid api key"}})
                    return
                request = json.loads(body)
                server.requests.append(request)
                choice = SCRIPT[server.calls % len(SCRIPT)]
                server.calls += 1
                prompt = len(json.dumps(request["messages"])) // 4
                completion = min(int(request.get("max_tokens") or 160), 20 + server.calls % 7)
                self._send(200, {"id": f"standin-{server.calls}", "object": "chat.completion", "model": request["model"],
                                 "choices": [{"index": 0, **choice}],
                                 "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                                           "total_tokens": prompt + completion}})

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> StandInChat:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()


if __name__ == "__main__":
    with StandInChat(int(sys.argv[1]) if len(sys.argv) > 1 else 0) as s:
        print(s.url, flush=True)
        threading.Event().wait()
