"""HTTP/1.1 message framing for the egress proxy's plain-HTTP path, strictly.

The proxy checks every request on a plain-HTTP connection, so it must find
where each request ends exactly where the origin server will; otherwise a
body could carry a second request past the check (request smuggling). Where
two readers of a request could disagree, it is refused rather than guessed at
(RFC 9112 sections 2.2, 5, 6.3 and 11.2): both Content-Length and
Transfer-Encoding, more than one Content-Length, a transfer coding other than
``chunked``, obsolete line folding, whitespace before a colon, a bare CR or
LF, a malformed chunk. Responses come from the allowed origin and are framed
by the RFC's rules; one that cannot be framed is an error, never a guess.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from typing import Literal

__all__ = ["BadMessage", "Framing", "Refused", "RequestHead", "ResponseHead", "copy_body", "parse_request",
           "parse_response", "split_host_port"]

_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
_TARGET = re.compile(r"^[\x21-\x7e]+$")
_BAD_VALUE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")  # controls other than HTAB
_DIGITS = re.compile(r"^[0-9]{1,18}$")
_STATUS_LINE = re.compile(r"^HTTP/1\.([01]) ([0-9]{3})(?: [^\x00-\x08\x0a-\x1f\x7f]*)?$")
# chunk-size [ chunk-ext ] CRLF; an extension may not hide a CR, LF or NUL.
_CHUNK_LINE = re.compile(rb"^([0-9A-Fa-f]{1,16})(?:[ \t]*;[\x09\x20-\x7e\x80-\xff]*)?\r\n$")
_COPY = 65536


class Refused(Exception):
    """The proxy will not carry this: ``reason`` goes to the log and the reply, with ``status``."""

    def __init__(self, reason: str, status: int = 403) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


class BadMessage(Refused):
    """A message that cannot be framed unambiguously (a 400)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason, 400)


@dataclass(frozen=True)
class Framing:
    """Where a message's body ends: no body, a length, chunked, or when the connection closes."""

    kind: Literal["none", "length", "chunked", "close"]
    length: int = 0


_NO_BODY = Framing("none")


@dataclass(frozen=True)
class RequestHead:
    method: str
    target: str
    version: str  # "HTTP/1.1" or "HTTP/1.0"
    headers: tuple[tuple[str, str], ...]  # (name as sent, value without surrounding whitespace)
    framing: Framing

    def values(self, name: str) -> list[str]:
        return [value for field, value in self.headers if field.lower() == name]

    @property
    def keep_alive(self) -> bool:
        """Whether the client may send another request after this one (HTTP/1.0 never, here)."""
        return self.version == "HTTP/1.1" and "close" not in _options(self.values("connection"))

    @property
    def connection_options(self) -> set[str]:
        return _options(self.values("connection"))


@dataclass(frozen=True)
class ResponseHead:
    status: int
    framing: Framing
    reusable: bool  # the origin keeps the connection open for another request


def parse_request(head: bytes) -> RequestHead:
    """A request head (ending in CRLF CRLF), validated; raises BadMessage."""
    lines = _lines(head.lstrip(b"\r\n"))  # a recipient may ignore empty lines before a request
    parts = lines[0].split(" ")
    if len(parts) != 3 or not _TOKEN.match(parts[0]) or not _TARGET.match(parts[1]):
        raise BadMessage("malformed request line")
    method, target, version = parts
    if version not in ("HTTP/1.1", "HTTP/1.0"):
        raise BadMessage(f"unsupported HTTP version {version[:16]!r}")
    headers = _headers(lines[1:])
    request = RequestHead(method, target, version, headers, _NO_BODY)
    return RequestHead(method, target, version, headers, _request_framing(request))


def parse_response(head: bytes, method: str) -> ResponseHead:
    """A response head to a request made with ``method``; raises BadMessage."""
    lines = _lines(head)
    match = _STATUS_LINE.match(lines[0])
    if match is None:
        raise BadMessage("the origin sent a malformed status line")
    minor, status = match.group(1), int(match.group(2))
    # Read as leniently as a client would: the origin is the allowed host, and what it
    # sends cannot make a request reach another (every request is checked on its own).
    headers = [(name.strip(), value.strip()) for name, colon, value in (line.partition(":") for line in lines[1:])
               if colon]
    options = _options([value for name, value in headers if name.lower() == "connection"])
    reusable = "close" not in options and (minor == "1" or "keep-alive" in options)
    if method == "HEAD" or status < 200 or status in (204, 304):
        return ResponseHead(status, _NO_BODY, reusable)
    codings = [value for name, value in headers if name.lower() == "transfer-encoding"]
    lengths = [value for name, value in headers if name.lower() == "content-length"]
    if codings:
        # Transfer-Encoding overrides Content-Length; a message with both must not be reused.
        last = ",".join(codings).split(",")[-1].strip().lower()
        if last == "chunked":
            return ResponseHead(status, Framing("chunked"), reusable and not lengths)
        return ResponseHead(status, Framing("close"), False)
    if lengths:
        values = {value.strip() for value in ",".join(lengths).split(",")}
        if len(values) != 1 or not _DIGITS.match(next(iter(values))):
            raise BadMessage("the origin sent an invalid Content-Length")
        return ResponseHead(status, Framing("length", int(values.pop())), reusable)
    return ResponseHead(status, Framing("close"), False)


async def copy_body(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, framing: Framing,
                    counts: list[int], index: int, head: bytes = b"") -> None:
    """Copy one message body as ``framing`` delimits it, no byte more; ``counts[index]`` adds what was read.

    ``head`` is written first; before a body of known length, in one write with the
    body's first bytes (one segment, not two, for a small response)."""
    if framing.kind == "length":
        await _copy_length(reader, writer, framing.length, counts, index, head)
        return
    if head:
        writer.write(head)
    if framing.kind == "chunked":
        await _copy_chunked(reader, writer, counts, index)
    elif framing.kind == "close":
        while data := await reader.read(_COPY):
            counts[index] += len(data)
            writer.write(data)
            await writer.drain()


async def _copy_length(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, length: int,
                       counts: list[int], index: int, head: bytes = b"") -> None:
    while length > 0:
        data = await reader.read(min(length, _COPY))
        if not data:
            raise BadMessage("the connection ended inside a message body")
        length -= len(data)
        counts[index] += len(data)
        writer.write(head + data if head else data)
        head = b""
        await writer.drain()
    if head:  # an empty body
        writer.write(head)


async def _copy_chunked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, counts: list[int],
                        index: int) -> None:
    while True:
        line = await reader.readuntil(b"\r\n")
        match = _CHUNK_LINE.match(line)
        if match is None:
            raise BadMessage("malformed chunk size line")
        size = int(match.group(1), 16)
        counts[index] += len(line)
        writer.write(line)
        if size == 0:
            break
        await _copy_length(reader, writer, size, counts, index)
        if await reader.readexactly(2) != b"\r\n":
            raise BadMessage("a chunk does not end with CRLF")
        counts[index] += 2
        writer.write(b"\r\n")
    while (line := await reader.readuntil(b"\r\n")) != b"\r\n":  # the trailer section
        _headers(_lines(line + b"\r\n"))
        counts[index] += len(line)
        writer.write(line)
    counts[index] += 2
    writer.write(b"\r\n")
    await writer.drain()


def _lines(head: bytes) -> list[str]:
    """The lines of a head that ends in CRLF CRLF; a CR or LF anywhere else is refused."""
    body = head[:-4] if head.endswith(b"\r\n\r\n") else head.removesuffix(b"\r\n")
    lines = body.decode("latin-1").split("\r\n")
    if any("\r" in line or "\n" in line for line in lines):
        raise BadMessage("a bare CR or LF in the head")
    return lines


def _headers(lines: list[str]) -> tuple[tuple[str, str], ...]:
    headers = []
    for line in lines:
        if line[:1] in (" ", "\t"):
            raise BadMessage("obsolete line folding")  # it could hide a second Host or a framing header
        name, colon, value = line.partition(":")
        if not colon or not _TOKEN.match(name):
            raise BadMessage(f"malformed header line {line[:40]!r}")  # whitespace before ':' included
        value = value.strip(" \t")
        if _BAD_VALUE.search(value):
            raise BadMessage(f"a control character in header {name!r}")
        headers.append((name, value))
    return tuple(headers)


def _request_framing(request: RequestHead) -> Framing:
    codings, lengths = request.values("transfer-encoding"), request.values("content-length")
    if codings:
        if lengths:
            raise BadMessage("both Transfer-Encoding and Content-Length")
        if request.version != "HTTP/1.1":
            raise BadMessage("Transfer-Encoding in an HTTP/1.0 request")
        if len(codings) != 1 or codings[0].lower() != "chunked":
            raise BadMessage("a Transfer-Encoding other than chunked")
        return Framing("chunked")
    if lengths:
        if len(lengths) != 1:
            raise BadMessage("more than one Content-Length")
        if not _DIGITS.match(lengths[0]):
            raise BadMessage("an invalid Content-Length")
        return Framing("length", int(lengths[0])) if int(lengths[0]) else _NO_BODY
    return _NO_BODY


def _options(values: list[str]) -> set[str]:
    return {option.strip().lower() for value in values for option in value.split(",") if option.strip()}


def split_host_port(target: str, default_port: int) -> tuple[str, int]:
    if target.startswith("["):
        host, _, rest = target[1:].partition("]")
        port = int(rest[1:]) if rest.startswith(":") else default_port
    elif target.count(":") == 1:
        host, port_text = target.split(":")
        port = int(port_text)
    else:
        host, port = target, default_port
    if not host or not 0 < port < 65536:
        raise ValueError(target)
    return host.lower().rstrip("."), port
