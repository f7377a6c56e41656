"""Just enough of TLS to read the server name a client asks for (SNI)."""

from __future__ import annotations

__all__ = ["TLS_RECORD_HEADER", "client_hello_length", "server_name"]

TLS_RECORD_HEADER = 5
_HANDSHAKE = 0x16
_CLIENT_HELLO = 0x01
_SERVER_NAME = 0x0000


def client_hello_length(header: bytes) -> int | None:
    """The record's total length from its 5-byte header, or None if this is not TLS."""
    if len(header) < TLS_RECORD_HEADER or header[0] != _HANDSHAKE or header[1] != 0x03:
        return None
    return TLS_RECORD_HEADER + int.from_bytes(header[3:5], "big")


def server_name(record: bytes) -> str | None:
    """The SNI host name in a ClientHello record, or None if absent or malformed."""
    try:
        return _parse(memoryview(record))
    except (IndexError, ValueError):
        return None


def _parse(data: memoryview) -> str | None:
    if data[0] != _HANDSHAKE or data[5] != _CLIENT_HELLO:
        return None
    position = 5 + 4 + 2 + 32  # record header, handshake header, version, random
    position += 1 + data[position]  # session id
    position += 2 + int.from_bytes(data[position:position + 2], "big")  # cipher suites
    position += 1 + data[position]  # compression methods
    end = position + 2 + int.from_bytes(data[position:position + 2], "big")
    position += 2
    while position + 4 <= end:
        kind = int.from_bytes(data[position:position + 2], "big")
        length = int.from_bytes(data[position + 2:position + 4], "big")
        body = data[position + 4:position + 4 + length]
        if kind == _SERVER_NAME:
            # server_name_list: u16 length, then (u8 type, u16 length, name). A name its own length
            # says is longer than the bytes there is cut, not a shorter name: slicing would read a
            # prefix of it ("allowed.test" of "allowed.test.elsewhere.example").
            if len(body) != length or body[2] != 0:
                return None
            size = int.from_bytes(body[3:5], "big")
            if 5 + size > length:
                return None
            return bytes(body[5:5 + size]).decode("ascii").lower().rstrip(".")
        position += 4 + length
    return None
