"""A loopback HTTP server that answers with scripted JSON and records what it was sent.

Tests point the real ``openai`` and ``anthropic`` SDKs at it, so the requests
checked are the ones the SDKs really put on the wire.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


class WireServer:
    """Serves queued ``(status, json)`` answers in order; records every request."""

    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self._answers: deque[tuple[int, Any]] = deque()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.02,), daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def answer(self, body: Any, status: int = 200) -> None:
        self._answers.append((status, body))

    def start(self) -> WireServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        wire = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"null")
                headers = {key.lower(): value for key, value in self.headers.items()}
                wire.requests.append(Recorded("POST", self.path, headers, body))
                status, answer = wire._answers.popleft() if wire._answers else (599, {"error": "nothing queued"})
                payload = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        return Handler
