"""What a sandbox holding a grant's token must not get past the gateway: another host, another
API of the provider, a request smuggled behind its own, a header that picks the key."""

from __future__ import annotations

import asyncio
import json

import pytest

from errand.gateway import Gateway, Grant, Upstream
from gateway.conftest import REAL_KEY
from models.provider_wire import Turn, anthropic_message, anthropic_usage
from models.wire import WireServer

pytestmark = pytest.mark.security
BODY = json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 1,
                   "messages": [{"role": "user", "content": "hi"}]}).encode()


async def _raw(gateway: Gateway, request: bytes) -> bytes:
    """Send ``request`` as it is written (no client tidies it up) and read until the gateway closes."""
    host, port = gateway.address
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(request)
    await writer.drain()
    try:
        async with asyncio.timeout(60):
            return await reader.read(1 << 20) + await reader.read(1 << 20)
    finally:
        writer.close()


def _post(grant: Grant, target: str, extra: str = "", body: bytes = BODY) -> bytes:
    return (f"POST {target} HTTP/1.1\r\nHost: gateway\r\nx-api-key: {grant.token}\r\n"
            f"content-type: application/json\r\ncontent-length: {len(body)}\r\n{extra}"
            "connection: close\r\n\r\n").encode() + body


@pytest.fixture
async def grant(gateway: Gateway, wire: WireServer) -> Grant:
    return await gateway.grant("attacked", Upstream("anthropic", wire.url, REAL_KEY))


async def test_an_absolute_target_naming_another_host_still_goes_to_the_grants_upstream(
        gateway: Gateway, grant: Grant, wire: WireServer) -> None:
    wire.answer(anthropic_message(Turn("ok"), anthropic_usage(1, 1)))
    answer = await _raw(gateway, _post(grant, "http://169.254.169.254/v1/messages"))
    assert answer.startswith(b"HTTP/1.1 200")
    assert [request.path for request in wire.requests] == ["/v1/messages"]  # the metadata host saw nothing


@pytest.mark.parametrize("target", ["/v1/messages/../files", "/v1/messages/..%2f..%2fv1%2ffiles",
                                    "/v1/%6dessages/batches", "//v1/messages", "/v1/messages%00"])
async def test_a_path_dressed_as_a_route_is_refused(gateway: Gateway, grant: Grant, wire: WireServer,
                                                    target: str) -> None:
    answer = await _raw(gateway, _post(grant, target))
    assert answer.split(b"\r\n", 1)[0] in (b"HTTP/1.1 404 Not Found", b"HTTP/1.1 400 Bad Request"), answer[:200]
    assert wire.requests == []


async def test_a_request_smuggled_behind_another_never_reaches_the_upstream(gateway: Gateway, grant: Grant,
                                                                           wire: WireServer) -> None:
    smuggled = _post(grant, "/v1/messages/batches")
    # Content-Length and chunked at once: a front end that believed one and a back end the other
    # would pass the second request through unchecked.
    chunked = f"{len(smuggled):x}\r\n".encode() + smuggled + b"\r\n0\r\n\r\n"
    request = (f"POST /v1/messages HTTP/1.1\r\nHost: gateway\r\nx-api-key: {grant.token}\r\n"
               f"content-length: 4\r\ntransfer-encoding: chunked\r\n\r\n").encode() + chunked
    await _raw(gateway, request)
    assert all(recorded.path == "/v1/messages" for recorded in wire.requests)


async def test_headers_that_would_choose_the_key_or_the_target_are_not_passed_on(
        gateway: Gateway, grant: Grant, wire: WireServer) -> None:
    wire.answer(anthropic_message(Turn("ok"), anthropic_usage(1, 1)))
    extra = ("authorization: Bearer sk-someone-elses\r\napi-key: sk-azure\r\nx-goog-api-key: sk-google\r\n"
             "cookie: session=1\r\nproxy-authorization: Basic eA==\r\nx-forwarded-host: evil.example\r\n")
    answer = await _raw(gateway, _post(grant, "/v1/messages?key=sk-query", extra))
    assert answer.startswith(b"HTTP/1.1 200")
    (seen,) = wire.requests
    assert seen.headers["x-api-key"] == REAL_KEY
    for header in ("authorization", "api-key", "x-goog-api-key", "cookie", "proxy-authorization"):
        assert header not in seen.headers
    assert "key=" not in seen.path and grant.token not in json.dumps([seen.headers, seen.path])


async def test_a_body_past_the_limit_is_refused_and_the_gateway_serves_on(gateway: Gateway, grant: Grant,
                                                                          wire: WireServer) -> None:
    big = b"{" + b" " * (33 << 20) + b"}"
    try:
        answer = await _raw(gateway, _post(grant, "/v1/messages", body=big))
    except ConnectionError:
        answer = b""  # refused before the client finished sending: the rest of its body met a closed socket
    assert answer == b"" or (answer.startswith(b"HTTP/1.1 400") and b"over" in answer)
    assert wire.requests == []
    wire.answer(anthropic_message(Turn("ok"), anthropic_usage(1, 1)))
    assert (await _raw(gateway, _post(grant, "/v1/messages"))).startswith(b"HTTP/1.1 200")
