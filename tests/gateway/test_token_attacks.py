"""What a sandbox holding a grant's token tries against the gateway, and what it gets.

Played through the real gateway (uvicorn on loopback) against a loopback wire
server, with raw sockets where a polite client would tidy the attack away: a
token guessed or bent, a token used after its run ended (a new connection and
one kept alive from before), a token on another provider's routes, headers
that break the framing, a token budget outrun by one long reply or by many calls
at once, and connections that hold the gateway by sending slowly.
"""

from __future__ import annotations

import asyncio
import json
import threading

import httpx
import pytest

from errand.gateway import Budget, Gateway, Grant, Upstream
from errand.models import Pricing
from gateway.conftest import REAL_KEY
from models.provider_wire import (
    Turn,
    anthropic_events,
    anthropic_message,
    anthropic_usage,
    openai_completion,
    openai_usage,
)
from models.wire import Json, Recorded, Stream, WireServer

pytestmark = [pytest.mark.security, pytest.mark.faults]
MESSAGE = {"model": "claude-sonnet-4-5", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}


def _post(token: str, target: str = "/v1/messages", body: bytes | None = None, extra: str = "",
          close: bool = True) -> bytes:
    body = json.dumps(MESSAGE).encode() if body is None else body
    return (f"POST {target} HTTP/1.1\r\nHost: gateway\r\nx-api-key: {token}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\n{extra}{'connection: close' if close else 'connection: keep-alive'}"
            "\r\n\r\n").encode() + body


async def _raw(gateway: Gateway, request: bytes) -> bytes:
    """``request`` as written, and all the gateway says until it closes."""
    reader, writer = await asyncio.open_connection(*gateway.address)
    writer.write(request)
    await writer.drain()
    try:
        async with asyncio.timeout(60):
            return await reader.read()
    finally:
        writer.close()


async def _reply(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """One whole reply (its head and its body, of a declared length) from a kept-alive connection."""
    async with asyncio.timeout(60):
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(int(line.split(b":", 1)[1]) for line in head.lower().split(b"\r\n")
                      if line.startswith(b"content-length:"))
        return head, await reader.readexactly(length)


@pytest.fixture
async def grant(gateway: Gateway, wire: WireServer) -> Grant:
    return await gateway.grant("attacked", Upstream("anthropic", wire.url, REAL_KEY))


@pytest.mark.parametrize("bend", ["one character changed", "cut short", "longer", "upper case", "another grant's id",
                                  "empty", "the key itself"])
async def test_a_guessed_or_bent_token_is_refused_and_reaches_nothing(gateway: Gateway, grant: Grant,
                                                                      wire: WireServer, bend: str) -> None:
    token = grant.token
    bent = {"one character changed": token[:-1] + ("A" if token[-1] != "A" else "B"), "cut short": token[:-4],
            "longer": token + "x", "upper case": token.upper(), "another grant's id": grant.id, "empty": "",
            "the key itself": REAL_KEY}[bend]
    answer = await _raw(gateway, _post(bent))
    assert answer.startswith(b"HTTP/1.1 401"), answer[:200]
    assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]["type"] == "authentication_error"
    assert wire.requests == [] and grant.requests == 0


async def test_a_token_is_its_own_grants_and_no_others(gateway: Gateway, grant: Grant, wire: WireServer) -> None:
    """Two tasks' grants, two upstreams: each token reaches its own upstream with its own key, and
    is metered to its own grant."""
    other_wire = WireServer().start()
    try:
        other = await gateway.grant("another-task", Upstream("anthropic", other_wire.url, "sk-other-tasks-key"))
        wire.answer(anthropic_message(Turn("mine"), anthropic_usage(3, 1)))
        other_wire.answer(anthropic_message(Turn("theirs"), anthropic_usage(5, 2)))
        assert b'"mine"' in await _raw(gateway, _post(grant.token))
        assert b'"theirs"' in await _raw(gateway, _post(other.token))
        await gateway.settle(grant)
        await gateway.settle(other)
        assert [r.headers["x-api-key"] for r in wire.requests] == [REAL_KEY]
        assert [r.headers["x-api-key"] for r in other_wire.requests] == ["sk-other-tasks-key"]
        assert (grant.tokens, other.tokens) == (4, 7)
    finally:
        other_wire.stop()


async def test_a_token_after_its_run_ended_is_refused_even_on_a_connection_opened_before(
        gateway: Gateway, grant: Grant, wire: WireServer) -> None:
    wire.answer(anthropic_message(Turn("before the end"), anthropic_usage(2, 1)))
    reader, writer = await asyncio.open_connection(*gateway.address)
    try:
        writer.write(_post(grant.token, close=False))
        head, _ = await _reply(reader)
        assert head.startswith(b"HTTP/1.1 200")
        await gateway.revoke(grant)
        replayed = _post(grant.token, close=False)  # the same request, word for word, on the same connection
        writer.write(replayed)
        head, body = await _reply(reader)
        assert head.startswith(b"HTTP/1.1 401") and b"revoked" in body
    finally:
        writer.close()
    answer = await _raw(gateway, _post(grant.token))  # and on a new connection
    assert answer.startswith(b"HTTP/1.1 401")
    assert len(wire.requests) == 1


@pytest.mark.parametrize("target", ["/v1/chat/completions", "/v1/responses",
                                    "/v1beta/models/gemini-2.5-pro:generateContent", "/v1/messages/batches",
                                    "/v1/files", "/v1/organizations/usage_report/messages", "/mcp"])
async def test_a_token_on_a_path_it_was_not_issued_for_is_refused(gateway: Gateway, grant: Grant,
                                                                  wire: WireServer, target: str) -> None:
    answer = await _raw(gateway, _post(grant.token, target))
    assert answer.split(b" ", 2)[1] in (b"401", b"404"), answer[:200]
    assert wire.requests == []


@pytest.mark.parametrize("extra", [
    "x-api-key: errand-gw-second\r\n",                       # a second token header: which one is read?
    "x-test: a\r\n x-api-key: " + REAL_KEY + "\r\n",         # a folded line carrying a header
    "x-test: a\rx-api-key: injected\r\n",                    # a bare CR inside a value
    "x-test: a\nx-api-key: injected\r\n",                    # a bare LF ending a line
    "x-test: " + "a" * (1 << 20) + "\r\n",                   # a megabyte of header
    "".join(f"x-h{i}: v\r\n" for i in range(20_000)),        # twenty thousand headers
    "transfer-encoding: chunked\r\n",                        # length and chunked at once
    "content-length: 5\r\n",                                 # two lengths
], ids=["second-token", "folded", "bare-cr", "bare-lf", "megabyte-header", "20k-headers", "cl-and-te",
        "two-lengths"])
async def test_a_request_with_broken_framing_or_headers_is_refused_and_the_gateway_serves_on(
        gateway: Gateway, grant: Grant, wire: WireServer, extra: str) -> None:
    try:
        answer = await _raw(gateway, _post(grant.token, extra=extra))
    except ConnectionError:
        answer = b""  # refused before the whole request was sent
    if answer.startswith(b"HTTP/1.1 200"):
        # Only a header the gateway does not read may pass, and never with another credential upstream.
        assert extra.startswith("x-api-key: errand-gw-second") is False, answer[:200]
    assert answer == b"" or answer.split(b" ", 2)[1] in (b"400", b"401", b"413", b"431"), answer[:200]
    assert wire.requests == []
    wire.answer(anthropic_message(Turn("still here"), anthropic_usage(1, 1)))
    assert b"still here" in await _raw(gateway, _post(grant.token))


async def test_one_long_reply_cannot_outrun_the_token_budget(gateway: Gateway, wire: WireServer) -> None:
    """The budget is checked before a call, and a reply is metered as it comes: a call asking for
    far more output than the budget has left is held to what is left."""
    grant = await gateway.grant("budgeted", Upstream("anthropic", wire.url, REAL_KEY), Budget(max_tokens=1000))
    wire.stream(anthropic_events(Turn("short"), anthropic_usage(100, 10)))
    asked = {**MESSAGE, "max_tokens": 64_000, "stream": True}
    answer = await _raw(gateway, _post(grant.token, body=json.dumps(asked).encode()))
    assert answer.startswith(b"HTTP/1.1 200")
    (seen,) = wire.requests
    assert seen.body["max_tokens"] <= 1000, seen.body["max_tokens"]
    assert seen.body["messages"] == MESSAGE["messages"]


async def test_one_long_reply_cannot_outrun_the_cost_budget(gateway: Gateway, wire: WireServer) -> None:
    """$0.01 at $10 per million output tokens pays for 1,000 of them, less the prompt's cost so far."""
    grant = await gateway.grant("budgeted", Upstream("anthropic", wire.url, REAL_KEY), Budget(max_cost=0.01),
                                pricing=Pricing(input=1.0, output=10.0))
    wire.answer(anthropic_message(Turn("ok"), anthropic_usage(2000, 100)))  # $0.002 + $0.001
    wire.stream(anthropic_events(Turn("long"), anthropic_usage(10, 10)))
    for _ in range(2):
        asked = {**MESSAGE, "max_tokens": 64_000}
        assert (await _raw(gateway, _post(grant.token, body=json.dumps(asked).encode()))).startswith(b"HTTP/1.1 200")
        await gateway.settle(grant)
    first, second = (request.body["max_tokens"] for request in wire.requests)
    assert first == 1000 and second == 700, (first, second)  # $0.007 left after the first call


async def test_a_call_asking_no_reply_limit_is_given_the_budgets(gateway: Gateway, wire: WireServer) -> None:
    grant = await gateway.grant("budgeted", Upstream("anthropic", wire.url, REAL_KEY), Budget(max_tokens=500))
    wire.answer(anthropic_message(Turn("ok"), anthropic_usage(1, 1)))
    await _raw(gateway, _post(grant.token, body=b'{"model": "claude-sonnet-4-5", "messages": []}'))
    (seen,) = wire.requests
    assert 0 < seen.body["max_tokens"] <= 500


async def test_a_chat_call_for_many_choices_is_held_to_the_budget_over_all_of_them(
        gateway: Gateway, wire: WireServer) -> None:
    grant = await gateway.grant("budgeted", Upstream("openai-chat", wire.url + "/v1", REAL_KEY), Budget(max_tokens=800))
    wire.answer(openai_completion(Turn("ok"), openai_usage(1, 1)))
    body = {"model": "gpt-4.1", "n": 8, "max_tokens": 4000, "messages": [{"role": "user", "content": "hi"}]}
    request = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: gateway\r\nauthorization: Bearer {grant.token}\r\n"
               f"content-type: application/json\r\ncontent-length: {len(json.dumps(body))}\r\nconnection: close"
               f"\r\n\r\n{json.dumps(body)}").encode()
    assert (await _raw(gateway, request)).startswith(b"HTTP/1.1 200")
    (seen,) = wire.requests
    limit = seen.body.get("max_completion_tokens") or seen.body.get("max_tokens")
    assert seen.body["n"] * limit <= 800, seen.body


async def test_many_calls_at_once_cannot_outrun_the_token_budget(gateway: Gateway, wire: WireServer) -> None:
    """Time of check against time of use: calls sent together, each checked before any has been
    metered, would all pass a check of what was spent. The calls under way hold the budget they
    may spend."""
    grant = await gateway.grant("budgeted", Upstream("anthropic", wire.url, REAL_KEY), Budget(max_tokens=1000))
    release = threading.Event()

    def slow(request: Recorded) -> Json | Stream:
        release.wait(120)
        return Json(anthropic_message(Turn("ok"), anthropic_usage(10, request.body["max_tokens"])))

    wire.respond(slow)
    calls = [asyncio.ensure_future(_raw(gateway, _post(grant.token, body=json.dumps({**MESSAGE, "max_tokens": 900})
                                                    .encode()))) for _ in range(6)]
    try:
        async with asyncio.timeout(120):
            while len(wire.requests) + sum(call.done() for call in calls) < 6:
                await asyncio.sleep(0.05)
    finally:
        release.set()
    answers = await asyncio.gather(*calls)
    await gateway.settle(grant)
    refused = [answer for answer in answers if answer.startswith(b"HTTP/1.1 400")]
    assert all(b"budget" in answer for answer in refused)
    assert sum(request.body["max_tokens"] for request in wire.requests) <= 1000, \
        [request.body["max_tokens"] for request in wire.requests]
    assert grant.tokens <= 1000 + 10 * len(wire.requests)  # what was asked of output, and each call's prompt


async def test_slow_connections_holding_the_gateway_do_not_stop_a_real_call(gateway: Gateway, grant: Grant,
                                                                            wire: WireServer) -> None:
    """Slow loris: many connections that send a request's head a byte at a time and never finish it."""
    slow = []
    for _ in range(200):
        _, writer = await asyncio.open_connection(*gateway.address)
        writer.write(b"POST /v1/messages HTTP/1.1\r\nHost: gateway\r\nx-api-key: ")
        slow.append(writer)
    try:
        for writer in slow:
            writer.write(b"e")
            await writer.drain()
        wire.answer(anthropic_message(Turn("served"), anthropic_usage(1, 1)))
        async with httpx.AsyncClient(trust_env=False, timeout=60) as client:
            host, port = gateway.address
            reply = await client.post(f"http://{host}:{port}/v1/messages", json=MESSAGE,
                                      headers={"x-api-key": grant.token})
        assert reply.status_code == 200 and reply.json()["content"][0]["text"] == "served"
    finally:
        for writer in slow:
            writer.close()
