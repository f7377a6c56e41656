"""A loopback HTTP server that answers as it is told and records what it was sent.

Tests point the real ``openai`` and ``anthropic`` SDKs at it, so the requests
checked are the ones the SDKs really put on the wire. An answer is JSON
(:class:`Json`, with a status and headers such as ``retry-after``) or a stream of
server-sent events (:class:`Stream`), which can be cut short: the connection
closes after ``cut_after`` events although the response declared more bytes,
as when a proxy or the provider drops a stream mid-reply; or nothing at all
(:class:`Hang`), for a client's timeout. Queued answers go out
in order; when none is queued, a responder function (:meth:`WireServer.respond`)
answers from the request itself, which lets a test play a whole long run.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass(frozen=True)
class Json:
    body: Any
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Stream:
    """Server-sent events, each ``(event name or None, data)``; ``cut_after`` events then a dropped connection."""

    events: list[tuple[str | None, Any]]
    cut_after: int | None = None


@dataclass(frozen=True)
class Hang:
    """No answer at all until the server stops: a provider that has gone quiet (the client times out)."""


Answer = Json | Stream | Hang
Responder = Callable[[Recorded], Answer]


class WireServer:
    """Serves queued answers in order, then the responder's; records every request."""

    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self._answers: deque[Answer] = deque()
        self._responder: Responder | None = None
        self._stopping = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.02,), daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def answer(self, body: Any, status: int = 200, headers: dict[str, str] | None = None) -> None:
        self._answers.append(Json(body, status, headers or {}))

    def stream(self, events: list[tuple[str | None, Any]], *, cut_after: int | None = None) -> None:
        self._answers.append(Stream(events, cut_after))

    def queue(self, answer: Answer) -> None:
        self._answers.append(answer)

    def respond(self, responder: Responder) -> None:
        """Answer with ``responder(request)`` whenever nothing is queued."""
        self._responder = responder

    def start(self) -> WireServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def _next(self, request: Recorded) -> Answer:
        if self._answers:
            return self._answers.popleft()
        if self._responder is not None:
            return self._responder(request)
        return Json({"error": "nothing queued"}, 599)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        wire = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"null")
                headers = {key.lower(): value for key, value in self.headers.items()}
                request = Recorded("POST", self.path, headers, body)
                wire.requests.append(request)
                answer = wire._next(request)
                if isinstance(answer, Stream):
                    self._stream(answer)
                elif isinstance(answer, Hang):
                    wire._stopping.wait()
                    self.close_connection = True
                else:
                    self._json(answer)

            def _json(self, answer: Json) -> None:
                payload = json.dumps(answer.body).encode()
                self.send_response(answer.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                for name, value in answer.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(payload)

            def _stream(self, answer: Stream) -> None:
                frames = [_frame(name, data) for name, data in answer.events]
                whole = b"".join(frames)
                sent = whole if answer.cut_after is None else b"".join(frames[:answer.cut_after])
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                # The declared length is the whole stream's, so a cut one is a broken body, not a short one.
                self.send_header("Content-Length", str(len(whole)))
                self.end_headers()
                self.wfile.write(sent)
                self.wfile.flush()
                self.close_connection = True

            def log_message(self, *args: Any) -> None:
                pass

        return Handler


def _frame(name: str | None, data: Any) -> bytes:
    text = data if isinstance(data, str) else json.dumps(data)
    return ((f"event: {name}\n" if name else "") + f"data: {text}\n\n").encode()
