"""A grant's transcript: every request and every reply, one JSON line each, secrets redacted.

``<directory>/<grant id>.jsonl``. A request is written when it arrives, its reply
when it ends (a streamed reply whole, as the client received it), so a call
that never ended still shows what was asked. The upstream key and the grant's
token are replaced by ``[redacted]`` wherever they occur in a line — headers,
bodies, text a model was shown — and the headers that carry credentials are
never written at all.

A :class:`TranscriptWriter` (one thread per gateway) writes the lines, so
neither the scan for secrets nor the disk is on a call's path; ``flush``
waits until every line handed to it is written.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, BinaryIO

__all__ = ["REDACTED", "Transcript", "TranscriptWriter"]

REDACTED = "[redacted]"
_REDACTED = REDACTED.encode()
_CREDENTIAL_HEADERS = frozenset({"authorization", "x-api-key", "x-goog-api-key", "api-key", "cookie",
                                 "proxy-authorization"})
BODY_LIMIT = 8 << 20  # bytes of one body kept; the rest is cut with a note


class Transcript:
    """Appends one grant's lines; opened on the first line, closed by :meth:`close`."""

    def __init__(self, path: Path, secrets: tuple[str, ...], writer: TranscriptWriter | None = None) -> None:
        self.path = path
        self._writer = writer  # None: each line written at once, here
        # As written inside a JSON string too (a key with a quote or backslash is escaped there).
        self._secrets = tuple(dict.fromkeys(form.encode() for secret in secrets if secret
                                            for form in (secret, json.dumps(secret)[1:-1])))
        self._handle: BinaryIO | None = None

    def request(self, call: int, method: str, path: str, headers: Mapping[str, str], body: bytes,
                is_json: bool) -> None:
        """``is_json``: the body parsed as JSON (the caller parsed it already), so it is kept as it came."""
        self._put({"kind": "request", "call": call, "time": time.time(), "method": method, "path": path,
                     "headers": _headers(headers)}, body, is_json)

    def reply(self, call: int, status: int | None, headers: Mapping[str, str], body: bytes, is_json: bool,
              metered: Mapping[str, Any]) -> None:
        self._put({"kind": "reply", "call": call, "time": time.time(), "status": status,
                     "headers": _headers(headers), **metered}, body, is_json)

    def note(self, call: int, **fields: Any) -> None:
        self._put({"kind": "refused", "call": call, "time": time.time(), **fields})

    def close(self) -> None:
        if self._writer is not None:
            self._writer.put(self._close)
        else:
            self._close()

    def _close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    def _put(self, record: dict[str, Any], body: bytes | None = None, is_json: bool = False) -> None:
        if self._writer is not None:
            self._writer.put(lambda: self._write(record, body, is_json))
        else:
            self._write(record, body, is_json)

    def _write(self, record: dict[str, Any], body: bytes | None = None, is_json: bool = False) -> None:
        # Bytes throughout, the body never decoded or parsed again: an agent's request is often hundreds
        # of kilobytes, and this is on the call's path.
        line = json.dumps(record, ensure_ascii=False).encode()
        if body is not None:
            line = b"".join((line[:-1], b', "body": ', _fragment(body, is_json), b"}"))
        for secret in self._secrets:
            if secret in line:
                line = line.replace(secret, _REDACTED)
        if self._handle is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._handle = open(self.path, "ab", buffering=0)  # noqa: SIM115 - kept open; each line one write
        self._handle.write(line + b"\n")


class TranscriptWriter:
    """A thread that runs the transcripts' writes in the order they were handed over."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def put(self, write: Callable[[], None]) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="errand-gateway-transcripts", daemon=True)
            self._thread.start()
        self._queue.put(write)

    async def flush(self) -> None:
        """Returns once every write handed over before it is done."""
        if self._thread is None:
            return
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()

        def settle() -> None:
            if not done.done():
                done.set_result(None)

        def wake() -> None:
            with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits
                loop.call_soon_threadsafe(settle)

        self._queue.put(wake)
        await done

    def stop(self) -> None:
        """Write what is left, then end the thread."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        while (write := self._queue.get()) is not None:
            try:
                write()
            except OSError as error:  # the directory went away: say so where the operator looks
                logging.getLogger("errand.gateway").warning("a transcript line was not written: %s", error)


def _headers(headers: Mapping[str, str]) -> dict[str, str]:
    return {name: REDACTED if name.lower() in _CREDENTIAL_HEADERS else value for name, value in headers.items()}


def _fragment(body: bytes, is_json: bool) -> bytes:
    """The body as a JSON value's text: a JSON body (``is_json``: the caller parsed it, so it is
    JSON and UTF-8) as it came, other text as a string."""
    if not body:
        return b"null"
    if len(body) > BODY_LIMIT:
        text = body[:BODY_LIMIT].decode("utf-8", "replace")
        return json.dumps(f"{text}\n[... {len(body) - BODY_LIMIT:,} more bytes not kept]",
                          ensure_ascii=False).encode()
    if is_json:
        # Line breaks in JSON text lie between its tokens: spaces there keep it one line and the same value.
        return body.replace(b"\r", b" ").replace(b"\n", b" ") if b"\n" in body or b"\r" in body else body
    return json.dumps(body.decode("utf-8", "replace"), ensure_ascii=False).encode()
