"""A grant's transcript: every request and every reply, one JSON line each, secrets redacted.

``<directory>/<grant id>.jsonl``. A request is written when it arrives, its reply
when it ends (a streamed reply whole, as the client received it), so a call
that never ended still shows what was asked. The upstream key and the grant's
token are replaced by ``[redacted]`` wherever they occur in a line — headers,
bodies, text a model was shown — and the headers that carry credentials are
never written at all.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

__all__ = ["REDACTED", "Transcript"]

REDACTED = "[redacted]"
_CREDENTIAL_HEADERS = frozenset({"authorization", "x-api-key", "x-goog-api-key", "api-key", "cookie",
                                 "proxy-authorization"})
BODY_LIMIT = 8 << 20  # characters of one body kept; the rest is cut with a note


class Transcript:
    """Appends one grant's lines; opened on the first line, closed by :meth:`close`."""

    def __init__(self, path: Path, secrets: tuple[str, ...]) -> None:
        self.path = path
        # As written inside a JSON string too (a key with a quote or backslash is escaped there).
        self._secrets = tuple(dict.fromkeys(form for secret in secrets if secret
                                            for form in (secret, json.dumps(secret)[1:-1])))
        self._handle: TextIO | None = None

    def request(self, call: int, method: str, path: str, headers: Mapping[str, str], body: bytes,
                is_json: bool) -> None:
        """``is_json``: the body parsed as JSON (the caller parsed it already), so it is kept as it came."""
        self._write({"kind": "request", "call": call, "time": time.time(), "method": method, "path": path,
                     "headers": _headers(headers)}, _fragment(body, is_json))

    def reply(self, call: int, status: int | None, headers: Mapping[str, str], body: bytes, is_json: bool,
              metered: Mapping[str, Any]) -> None:
        self._write({"kind": "reply", "call": call, "time": time.time(), "status": status,
                     "headers": _headers(headers), **metered}, _fragment(body, is_json))

    def note(self, call: int, **fields: Any) -> None:
        self._write({"kind": "refused", "call": call, "time": time.time(), **fields})

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    def _write(self, record: dict[str, Any], body: str | None = None) -> None:
        line = json.dumps(record, ensure_ascii=False)
        if body is not None:
            line = f'{line[:-1]}, "body": {body}}}'
        for secret in self._secrets:
            if secret in line:
                line = line.replace(secret, REDACTED)
        if self._handle is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._handle = open(self.path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115 - kept open
        self._handle.write(line + "\n")


def _headers(headers: Mapping[str, str]) -> dict[str, str]:
    return {name: REDACTED if name.lower() in _CREDENTIAL_HEADERS else value for name, value in headers.items()}


def _fragment(body: bytes, is_json: bool) -> str:
    """The body as a JSON value's text: a JSON body as it came (not parsed and written again: an
    agent's request is often hundreds of kilobytes, and this is on the call's path), other text
    as a string."""
    text = body.decode("utf-8", "replace")
    if not text:
        return "null"
    if len(text) > BODY_LIMIT:
        return json.dumps(text[:BODY_LIMIT] + f"\n[... {len(text) - BODY_LIMIT:,} more characters not kept]",
                          ensure_ascii=False)
    if is_json:
        # Line breaks in JSON text lie between its tokens: spaces there keep it one line and the same value.
        return text.replace("\r", " ").replace("\n", " ") if "\n" in text or "\r" in text else text
    return json.dumps(text, ensure_ascii=False)
