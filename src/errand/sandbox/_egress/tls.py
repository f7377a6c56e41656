"""Just enough of TLS to read the server name a client asks for (SNI)."""

from __future__ import annotations

import re

__all__ = ["TLS_RECORD_HEADER", "UnreadableHello", "client_hello_length", "server_name"]

TLS_RECORD_HEADER = 5
_HANDSHAKE = 0x16
_CLIENT_HELLO = 0x01
_SERVER_NAME = 0x0000
_HOST_NAME = 0x00
# Labels of letters, digits, hyphens and underscores (seen in real names), dot-separated, none empty.
_HOST = re.compile(rb"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*")


def client_hello_length(header: bytes) -> int | None:
    """The record's total length from its 5-byte header, or None if this is not TLS."""
    if len(header) < TLS_RECORD_HEADER or header[0] != _HANDSHAKE or header[1] != 0x03:
        return None
    return TLS_RECORD_HEADER + int.from_bytes(header[3:5], "big")


class UnreadableHello(ValueError):
    """A first record that is not one whole, well-formed ClientHello: the proxy cannot tell which
    name a server would read from it, so it carries none of it."""


def server_name(record: bytes) -> str | None:
    """The SNI host name of the ClientHello that fills ``record`` (lowercased, one trailing dot
    dropped), or None for a whole hello that names none. :class:`UnreadableHello` for anything
    else: a hello cut short, or split over several records (a server puts them together and reads
    the name the first one lacks), a length that runs past what holds it, two names, a name that is
    not an ASCII host name."""
    try:
        return _parse(memoryview(record))
    except IndexError:
        raise UnreadableHello("the ClientHello is cut short") from None


def _u16(data: memoryview, at: int) -> int:
    if at + 2 > len(data):
        raise IndexError(at)
    return int.from_bytes(data[at:at + 2], "big")


def _within(data: memoryview, start: int, length: int, what: str) -> memoryview:
    """``length`` bytes from ``start``, all of them there: a length that runs past is not cut short to fit."""
    if start + length > len(data):
        raise UnreadableHello(f"its {what} runs past the bytes that hold it")
    return data[start:start + length]


def _parse(data: memoryview) -> str | None:
    if data[0] != _HANDSHAKE or data[5] != _CLIENT_HELLO:
        raise UnreadableHello("the first record is not a ClientHello")
    if len(data) != TLS_RECORD_HEADER + _u16(data, 3):
        raise UnreadableHello("the record is cut short")
    hello_length = int.from_bytes(data[6:9], "big")
    if 4 + hello_length != len(data) - TLS_RECORD_HEADER:
        raise UnreadableHello("the ClientHello does not fill its record (split over several records, or followed by "
                              "more)")
    position = 5 + 4 + 2 + 32  # record header, handshake header, version, random
    position += 1 + data[position]  # session id
    position += 2 + _u16(data, position)  # cipher suites
    position += 1 + data[position]  # compression methods
    if position == len(data):
        return None  # a hello without extensions
    extensions = _within(data, position + 2, _u16(data, position), "extensions")
    if position + 2 + len(extensions) != len(data):
        raise UnreadableHello("bytes follow its extensions")
    name: str | None = None
    seen: set[int] = set()
    at = 0
    while at < len(extensions):
        kind, length = _u16(extensions, at), _u16(extensions, at + 2)
        body = _within(extensions, at + 4, length, "extension")
        if kind in seen:
            raise UnreadableHello(f"extension {kind} twice")
        seen.add(kind)
        if kind == _SERVER_NAME:
            name = _host_name(body)
        at += 4 + length
    return name


def _host_name(body: memoryview) -> str:
    """The one host_name of a server_name extension: u16 list length, then (u8 type, u16 length, name)."""
    if _u16(body, 0) != len(body) - 2 or len(body) < 5 or body[2] != _HOST_NAME:
        raise UnreadableHello("its server_name extension is not one host name")
    size = _u16(body, 3)
    if 5 + size != len(body):
        raise UnreadableHello("its server_name extension is not one host name")
    name = bytes(body[5:])
    if name.endswith(b"."):
        name = name[:-1]
    if not _HOST.fullmatch(name):
        raise UnreadableHello("its server name is not a host name")
    return name.decode("ascii").lower()
