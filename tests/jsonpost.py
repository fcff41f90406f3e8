"""A JSON-over-HTTP server on 127.0.0.1 for the tests' stand-in endpoints (never a model): each POST is
handed to ``answer(path, headers, body) -> (status, payload)`` and the payload sent back as JSON."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Answer = Callable[[str, Mapping[str, str], bytes], tuple[int, Any]]


class JsonPostServer:
    """``with JsonPostServer(answer) as s: s.url`` (the ``/v1`` base URL); or ``start()`` / ``close()``."""

    def __init__(self, answer: Answer, port: int = 0) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                status, payload = answer(self.path, dict(self.headers), body)
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

    def start(self) -> None:
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()

    def __enter__(self) -> JsonPostServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
