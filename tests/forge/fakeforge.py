"""What the loopback Gitea and GitLab share: a threaded HTTP server on 127.0.0.1 whose API
paths go to the forge's routes (after its token check and any failure a test queued) and
whose other paths are the git remote (:mod:`.gitremote`)."""

from __future__ import annotations

import itertools
import json
import re
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from .gitremote import bare_clone, branch_head, serve_git

Answer = tuple[int, Any, dict[str, str]]
Route = tuple[str, "re.Pattern[str]", Callable[..., Answer]]


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


class FakeForge:
    """A subclass names its ``api`` prefix, its ``routes()`` and how it reads a token."""

    api = "/api"
    display = "forge"

    def __init__(self, root: Path, *, token: str, webhook_secret: str = "") -> None:
        self.root = root
        self.token = token
        self.webhook_secret = webhook_secret
        self.requests: list[Seen] = []
        self.fail_next: list[tuple[int, dict[str, str]]] = []  # (status, headers) answered before the real one
        self.bare: dict[str, Path] = {}
        self._ids = itertools.count(1000)
        self._lock = threading.RLock()
        self._routes = [(method, re.compile(f"^{self.api}{pattern}$"), handler)
                        for method, pattern, handler in self.routes()]
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.02,), daemon=True)

    # ------------------------------------------------------------ what a subclass says

    def routes(self) -> list[tuple[str, str, Callable[..., Answer]]]:
        raise NotImplementedError

    def authorized(self, headers: dict[str, str]) -> bool:
        raise NotImplementedError

    # ------------------------------------------------------------ lifecycle

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def api_url(self) -> str:
        return self.url + self.api

    def start(self) -> FakeForge:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def add_bare(self, full_name: str, source: Path) -> Path:
        self.bare[full_name] = bare_clone(self.root, full_name, source)
        return self.bare[full_name]

    def clone_url(self, full_name: str) -> str:
        return f"{self.url}/{full_name}.git"

    def branch_head(self, full_name: str, branch: str) -> str | None:
        return branch_head(self.bare[full_name], branch)

    def new_id(self) -> int:
        return next(self._ids)

    # ------------------------------------------------------------ serving

    def dispatch(self, method: str, path: str, query: dict[str, list[str]], body: Any) -> Answer:
        if self.fail_next:
            status, headers = self.fail_next.pop(0)
            return status, {"message": "rate limit exceeded" if status in (403, 429) else "failure"}, headers
        for route_method, pattern, handler in self._routes:
            match = pattern.match(path)
            if match and route_method == method:
                with self._lock:
                    return handler(*match.groups(), body=body, query=query)
        return 404, {"message": "404 Not Found"}, {}


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def page_of(items: list[Any], query: dict[str, list[str]], *, size: str, default: int, link: str | None,
            next_page_header: bool) -> Answer:
    """One page of ``items`` as ``size``/``page`` ask; ``Link: rel="next"`` to ``link`` and/or
    ``X-Next-Page`` when more follow."""
    per_page = int(query.get(size, [str(default)])[0])
    page = int(query.get("page", ["1"])[0])
    chunk = items[(page - 1) * per_page: page * per_page]
    headers = {"X-Total-Count": str(len(items))}
    more = page * per_page < len(items)
    if next_page_header:
        headers["X-Next-Page"] = str(page + 1) if more else ""
    if more and link is not None:
        rest = urlencode({**{k: v[0] for k, v in query.items()}, size: per_page, "page": page + 1})
        headers["Link"] = f'<{link}?{rest}>; rel="next"'  # the whole query, as the forges send it
    return 200, chunk, headers


def _handler(fake: FakeForge) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            super().setup()
            # Headers and body go out in two writes; on a kept-alive connection Nagle's algorithm
            # would hold the body back for the client's delayed ACK (~40 ms a response).
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def do_GET(self) -> None:
            self._dispatch("GET")

        def do_POST(self) -> None:
            self._dispatch("POST")

        def do_PUT(self) -> None:
            self._dispatch("PUT")

        def log_message(self, *args: Any) -> None:
            pass

        def _dispatch(self, method: str) -> None:
            url = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            headers = {k.lower(): v for k, v in self.headers.items()}
            if not url.path.startswith(fake.api + "/"):
                fake.requests.append(Seen(method, url.path, headers, None))
                serve_git(self, fake.root, fake.token, method, url.path, url.query, raw)
                return
            body = json.loads(raw) if raw else None
            fake.requests.append(Seen(method, url.path, headers, body))
            if not fake.authorized(headers):
                self._json(401, {"message": "401 Unauthorized"}, {})
                return
            self._json(*fake.dispatch(method, url.path, parse_qs(url.query), body))

        def _json(self, status: int, answer: Any, headers: dict[str, str]) -> None:
            raw = isinstance(answer, bytes)  # a job's log: text, not JSON
            payload = answer if raw else json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/plain; charset=utf-8" if raw else "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(payload)))
            for key, value in headers.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(payload)

    return Handler
