"""The egress proxy's plain-HTTP exchanges: one request to an origin, its response back.

``proxy`` checks each request on a plain-HTTP client connection against the
policy and picks the upstream for its host and port; this module turns the
request into what the origin gets (origin form, one Host, no hop-by-hop
headers), sends its body exactly as it is framed, and relays the response to
its end, so the next bytes from the client are read as the next request, and
checked as one.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from errand.sandbox._egress.http import (
    BadMessage,
    Refused,
    RequestHead,
    ResponseHead,
    copy_body,
    parse_response,
    split_host_port,
)

__all__ = ["Upstream", "absolute_target", "exchange", "next_head", "origin_head", "read_head"]

# Dropped on the way to the origin. Upgrade among them: after a 101 the connection
# would no longer be HTTP this proxy can check (h2c carries requests for any host).
_HOP_BY_HOP = frozenset(("host", "connection", "keep-alive", "proxy-connection", "proxy-authorization", "te",
                         "upgrade", "http2-settings"))
_FRAMING = frozenset(("host", "content-length", "transfer-encoding"))


class _Answering(Protocol):
    answered: bool  # some of a response has reached the client: no error reply can follow


class Upstream:
    """The connection to one origin host and port, reused while requests keep naming it."""

    def __init__(self, host: str, port: int, address: str, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
        self.host, self.port, self.address = host, port, address
        self.reader, self.writer = reader, writer
        self.counts = [0, 0]  # bytes out, bytes in
        self.reusable = True

    def serves(self, host: str, port: int) -> bool:
        return (self.reusable and (self.host, self.port) == (host, port) and not self.reader.at_eof()
                and not self.writer.is_closing())


def absolute_target(target: str) -> tuple[str, int, str]:
    """Host, port and origin-form path of an absolute-form ``http://`` request target."""
    if target[:7].lower() != "http://":
        raise Refused("only http:// URLs can be proxied without CONNECT", 400)
    rest = target[7:]
    cut = min((i for i in (rest.find("/"), rest.find("?"), rest.find("#")) if i >= 0), default=len(rest))
    authority, path = rest[:cut], rest[cut:]
    try:
        host, port = split_host_port(authority.rsplit("@", 1)[-1], 80)
    except ValueError:
        raise Refused("a malformed host in the URL", 400) from None
    path = path.partition("#")[0]  # a fragment is the client's own
    return host, port, path if path.startswith("/") else "/" + path


def origin_head(request: RequestHead, path: str, host: str, port: int, default_port: int = 80) -> bytes:
    """The request head as the origin gets it: origin form, exactly one Host (its port left out
    when ``default_port``), our own Connection."""
    hosts = request.values("host")
    if len(hosts) > 1:
        raise Refused("more than one Host header")
    try:
        named = split_host_port(hosts[0], port) if hosts else (host, port)
    except ValueError:
        named = ("", 0)
    if named != (host, port):
        raise Refused(f"Host header {hosts[0]!r} does not match the request's host {host!r}")
    options = request.connection_options
    if options & _FRAMING:
        # "Connection: Content-Length" asks a proxy to drop the framing the origin relies on.
        raise BadMessage("Connection names a header the request depends on")
    dropped = _HOP_BY_HOP | options
    kept = [f"{name}: {value}" for name, value in request.headers if name.lower() not in dropped]
    shown = f"[{host}]" if ":" in host else host
    authority = shown if port == default_port else f"{shown}:{port}"
    close = [] if request.keep_alive else ["Connection: close"]
    lines = [f"{request.method} {path} HTTP/1.1", f"Host: {authority}", *kept, *close, "", ""]
    return "\r\n".join(lines).encode("latin-1")


async def read_head(reader: asyncio.StreamReader, timeout: float, what: str) -> bytes:
    """A message head (to its blank line), however slowly it comes within ``timeout`` seconds;
    refused (408) with ``what`` named once the time is up."""
    try:
        async with asyncio.timeout(timeout):
            return await reader.readuntil(b"\r\n\r\n")
    except TimeoutError:
        raise Refused(f"{what} did not arrive within {timeout:g}s ({len(_waiting(reader))} bytes came)",
                      408) from None


async def next_head(reader: asyncio.StreamReader, idle: float, timeout: float) -> bytes | None:
    """The next request's head on a kept-alive connection; None once the client is done, or has
    sent nothing for ``idle`` seconds. A head that has begun gets ``timeout`` seconds to end."""
    try:
        async with asyncio.timeout(idle):
            return await reader.readuntil(b"\r\n\r\n")  # cancelled, it leaves what came in the buffer
    except asyncio.IncompleteReadError as error:
        if error.partial.strip(b"\r\n"):
            raise
        return None
    except TimeoutError:
        if not _waiting(reader).strip(b"\r\n"):
            return None
    return await read_head(reader, timeout, "the next request's head")


def _waiting(reader: asyncio.StreamReader) -> bytes:
    """What the client has sent that no read has taken yet (a head still arriving)."""
    return bytes(getattr(reader, "_buffer", b""))


async def exchange(connection: _Answering, request: RequestHead, origin: bytes, reader: asyncio.StreamReader,
                   writer: asyncio.StreamWriter, upstream: Upstream) -> bool:
    """Send one request (its body exactly as framed) and relay its response; returns whether the
    client connection may carry another request."""
    upstream.counts[0] += len(origin)
    upstream.writer.write(origin)
    if request.framing.kind == "none":
        response = await _relay_response(connection, request.method, upstream, writer)
        return request.keep_alive and response.framing.kind != "close"
    # The body goes while the response is awaited: a client may wait for 100 Continue first.
    sending = asyncio.ensure_future(copy_body(reader, upstream.writer, request.framing, upstream.counts, 0))
    relaying = asyncio.ensure_future(_relay_response(connection, request.method, upstream, writer))
    try:
        await asyncio.wait((sending, relaying), return_when=asyncio.FIRST_COMPLETED)
        if not sending.done():
            relaying.result()
            # Answered before the whole body arrived: what the client sends next cannot be framed.
            upstream.reusable = False
            return False
        sending.result()
        response = await relaying
    finally:
        for task in (sending, relaying):
            task.cancel()
    return request.keep_alive and response.framing.kind != "close"


async def _relay_response(connection: _Answering, method: str, upstream: Upstream,
                          writer: asyncio.StreamWriter) -> ResponseHead:
    try:
        while True:
            head = await upstream.reader.readuntil(b"\r\n\r\n")
            upstream.counts[1] += len(head)
            response = parse_response(head, method)
            if response.status == 101:
                raise Refused("the origin switched protocols; only HTTP/1.1 is carried", 502)
            connection.answered = True
            if response.status >= 200:
                break
            writer.write(head)
            await writer.drain()  # an interim response (100 Continue): the final one follows
        await copy_body(upstream.reader, writer, response.framing, upstream.counts, 1, head)
        await writer.drain()
    except BadMessage as error:
        upstream.reusable = False
        raise Refused(error.reason, 502) from None
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
        upstream.reusable = False
        raise Refused("the origin ended the connection inside its response", 502) from None
    upstream.reusable = upstream.reusable and response.reusable
    connection.answered = False
    return response
