"""The egress proxy's HTTP/1.1 framing: where a message ends, and what is refused as ambiguous."""

from __future__ import annotations

import asyncio

import pytest

from errand.sandbox._egress.http import BadMessage, Framing, copy_body, parse_request, parse_response


def head(*lines: str, request_line: str = "POST http://example.org/ HTTP/1.1") -> bytes:
    return "\r\n".join([request_line, "Host: example.org", *lines, "", ""]).encode("latin-1")


@pytest.mark.parametrize(("lines", "framing"), [
    ((), Framing("none")),
    (("Content-Length: 12",), Framing("length", 12)),
    (("Content-Length: 0",), Framing("none")),
    (("Transfer-Encoding: chunked",), Framing("chunked")),
    (("transfer-encoding: CHUNKED",), Framing("chunked")),
])
def test_request_framing(lines: tuple[str, ...], framing: Framing) -> None:
    assert parse_request(head(*lines)).framing == framing


@pytest.mark.parametrize(("raw", "reason"), [
    (head("Content-Length: 5", "Transfer-Encoding: chunked"), "both Transfer-Encoding and Content-Length"),
    (head("Content-Length: 5", "Content-Length: 5"), "more than one Content-Length"),
    (head("Content-Length: 5, 5"), "an invalid Content-Length"),
    (head("Content-Length: +5"), "an invalid Content-Length"),
    (head("Content-Length: 0x5"), "an invalid Content-Length"),
    (head("Transfer-Encoding: gzip, chunked"), "a Transfer-Encoding other than chunked"),
    (head("Transfer-Encoding: chunked", "Transfer-Encoding: chunked"), "a Transfer-Encoding other than chunked"),
    (head("Transfer-Encoding: chunked\x0b"), "a control character in header 'Transfer-Encoding'"),
    (head("Transfer-Encoding : chunked"), "malformed header line 'Transfer-Encoding : chunked'"),
    (head("Transfer-Encoding:", " chunked"), "obsolete line folding"),
    (head("X: 1\nContent-Length: 5"), "a bare CR or LF in the head"),
    (head("X: 1\rContent-Length: 5"), "a bare CR or LF in the head"),
    (head("Transfer-Encoding: chunked", request_line="POST http://example.org/ HTTP/1.0"),
     "Transfer-Encoding in an HTTP/1.0 request"),
    (head(request_line="GET  http://example.org/ HTTP/1.1"), "malformed request line"),
    (head(request_line="GET http://example.org/ HTTP/2.0"), "unsupported HTTP version 'HTTP/2.0'"),
])
def test_ambiguous_requests_are_refused(raw: bytes, reason: str) -> None:
    with pytest.raises(BadMessage) as caught:
        parse_request(raw)
    assert caught.value.reason == reason
    assert caught.value.status == 400


def test_keep_alive_and_connection_options() -> None:
    assert parse_request(head()).keep_alive
    assert not parse_request(head("Connection: keep-alive, Close")).keep_alive
    assert not parse_request(head(request_line="GET http://example.org/ HTTP/1.0")).keep_alive
    assert parse_request(head("Connection: Upgrade, X-Thing")).connection_options == {"upgrade", "x-thing"}


@pytest.mark.parametrize(("raw", "method", "framing", "reusable"), [
    (b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n", "GET", Framing("length", 3), True),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n", "HEAD", Framing("none"), True),
    (b"HTTP/1.1 204 No Content\r\n\r\n", "GET", Framing("none"), True),
    (b"HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n", "GET", Framing("none"), True),
    (b"HTTP/1.1 100 Continue\r\n\r\n", "POST", Framing("none"), True),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", "GET", Framing("chunked"), True),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", "GET", Framing("chunked"), True),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n", "GET", Framing("chunked"),
     False),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", "GET", Framing("close"), False),
    (b"HTTP/1.1 200 OK\r\n\r\n", "GET", Framing("close"), False),
    (b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 3\r\n\r\n", "GET", Framing("length", 3), False),
    (b"HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\n", "GET", Framing("length", 3), False),
    (b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 3\r\n\r\n", "GET", Framing("length", 3), True),
])
def test_response_framing(raw: bytes, method: str, framing: Framing, reusable: bool) -> None:
    response = parse_response(raw, method)
    assert (response.framing, response.reusable) == (framing, reusable)


@pytest.mark.parametrize("raw", [b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
                                 b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", b"SSH-2.0-OpenSSH\r\n\r\n"])
def test_unframeable_responses_are_errors(raw: bytes) -> None:
    with pytest.raises(BadMessage):
        parse_response(raw, "GET")


class _Sink:
    def __init__(self) -> None:
        self.data = bytearray()

    def write(self, data: bytes) -> None:
        self.data += data

    async def drain(self) -> None:
        pass


async def _copy(stream: bytes, framing: Framing) -> tuple[bytes, bytes]:
    reader = asyncio.StreamReader()
    reader.feed_data(stream)
    reader.feed_eof()
    sink, counts = _Sink(), [0]
    await copy_body(reader, sink, framing, counts, 0)  # type: ignore[arg-type]
    assert counts[0] == len(sink.data)
    return bytes(sink.data), await reader.read()


async def test_a_body_is_copied_to_its_end_and_no_further() -> None:
    after = b"GET http://other.example/ HTTP/1.1\r\n\r\n"
    assert await _copy(b"hello" + after, Framing("length", 5)) == (b"hello", after)
    chunked = b"5;note=1\r\nhello\r\n0\r\nX-Trailer: 1\r\n\r\n"
    assert await _copy(chunked + after, Framing("chunked")) == (chunked, after)
    assert await _copy(after, Framing("none")) == (b"", after)


@pytest.mark.parametrize("stream", [b"0x5\r\nhello\r\n0\r\n\r\n", b" 5\r\nhello\r\n0\r\n\r\n",
                                    b"5;\n\r\nhello\r\n0\r\n\r\n", b"5\r\nhelloXX0\r\n\r\n",
                                    b"0\r\nX : y\r\n\r\n", b"0\r\n folded\r\n\r\n"])
async def test_malformed_chunks_are_refused(stream: bytes) -> None:
    with pytest.raises(BadMessage):
        await _copy(stream, Framing("chunked"))


async def test_a_body_cut_short_is_an_error() -> None:
    with pytest.raises(BadMessage):
        await _copy(b"hel", Framing("length", 5))


async def test_a_head_goes_out_with_the_body_and_alone_before_an_empty_one() -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n"
    for framing, stream, expected in ((Framing("length", 5), b"hello", head + b"hello"),
                                      (Framing("length", 0), b"next", head), (Framing("none"), b"next", head),
                                      (Framing("chunked"), b"0\r\n\r\n", head + b"0\r\n\r\n")):
        reader = asyncio.StreamReader()
        reader.feed_data(stream)
        reader.feed_eof()
        sink, counts = _Sink(), [0]
        await copy_body(reader, sink, framing, counts, 0, head)  # type: ignore[arg-type]
        assert bytes(sink.data) == expected, framing
        assert counts[0] == len(expected) - len(head)
