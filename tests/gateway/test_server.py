"""The real SDKs through the gateway to a loopback wire server: the key swapped in on the host,
every call metered as the provider reported it, streaming included, and written down."""

from __future__ import annotations

import asyncio
import json
import socket

import anthropic
import httpx
import openai
import pytest

from errand.gateway import Budget, Gateway, Grant, Upstream
from errand.models import Pricing, Usage, profile_for
from gateway.conftest import REAL_KEY
from gateway.wires import gemini_chunks, gemini_usage, response, response_events, responses_usage
from models.provider_wire import (
    Turn,
    anthropic_events,
    anthropic_message,
    anthropic_usage,
    openai_chunks,
    openai_completion,
    openai_usage,
)
from models.wire import Hang, Recorded, WireServer

MESSAGES = [{"role": "user", "content": "Fix the failing test."}]


def _anthropic(grant: Grant) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=grant.base_url, api_key=grant.token, max_retries=0)


def _openai(grant: Grant) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=grant.base_url, api_key=grant.token, max_retries=0)


def _sent_upstream(request: Recorded) -> str:
    return json.dumps([request.headers, request.body])


def _assert_key_swapped(wire: WireServer, grant: Grant, header: str, value: str) -> None:
    """The wire saw the real key in the provider's header, and the token nowhere."""
    assert wire.requests, "the wire server was not called"
    for request in wire.requests:
        assert request.headers[header] == value
        assert grant.token not in _sent_upstream(request)


async def test_anthropic_messages_whole_and_streamed(gateway: Gateway, wire: WireServer) -> None:
    grant = await gateway.grant("task-1", Upstream("anthropic", wire.url, REAL_KEY))
    client = _anthropic(grant)
    wire.answer(anthropic_message(Turn("Done."), anthropic_usage(120, 30, read=1024, write=0)))
    raw = await client.messages.with_raw_response.create(model="claude-sonnet-4-5", max_tokens=100,
                                                         messages=MESSAGES)  # type: ignore[arg-type]
    assert (await raw.parse()).content[0].text == "Done."  # type: ignore[union-attr]
    assert REAL_KEY not in raw.http_response.text + json.dumps(dict(raw.http_response.headers))

    wire.stream(anthropic_events(Turn("Streamed."), anthropic_usage(200, 45, write=1100)))
    async with client.messages.stream(model="claude-sonnet-4-5", max_tokens=100,
                                      messages=MESSAGES) as stream:  # type: ignore[arg-type]
        final = await stream.get_final_message()
    assert final.content[0].text == "Streamed."  # type: ignore[union-attr]

    _assert_key_swapped(wire, grant, "x-api-key", REAL_KEY)
    await gateway.settle(grant)
    assert [call.usage for call in grant.calls] == [Usage(1144, 30, 1024, 0), Usage(1300, 45, 0, 1100)]
    assert [call.streamed for call in grant.calls] == [False, True]
    assert all(call.complete and call.status == 200 for call in grant.calls)
    price = profile_for("claude-sonnet-4-5")
    assert grant.cost == pytest.approx(sum(price.cost(call.usage) or 0 for call in grant.calls if call.usage))
    assert grant.tokens == 1144 + 30 + 1300 + 45


async def test_an_anthropic_bearer_token_is_sent_as_the_providers_bearer(gateway: Gateway, wire: WireServer) -> None:
    """Claude Code with ANTHROPIC_AUTH_TOKEN sends the token as a Bearer; an OAuth upstream takes one."""
    grant = await gateway.grant("task-1", Upstream("anthropic", wire.url, REAL_KEY, bearer=True))
    wire.answer(anthropic_message(Turn("ok"), anthropic_usage(1, 1)))
    client = anthropic.AsyncAnthropic(base_url=grant.base_url, auth_token=grant.token, max_retries=0)
    await client.messages.create(model="claude-sonnet-4-5", max_tokens=5, messages=MESSAGES)  # type: ignore[arg-type]
    _assert_key_swapped(wire, grant, "authorization", f"Bearer {REAL_KEY}")
    assert "x-api-key" not in wire.requests[0].headers


async def test_openai_chat_whole_and_streamed(gateway: Gateway, wire: WireServer) -> None:
    grant = await gateway.grant("task-2", Upstream("openai-chat", wire.url + "/v1", REAL_KEY))
    client = _openai(grant)
    wire.answer(openai_completion(Turn("Done."), openai_usage(300, 20, cached=256)))
    reply = await client.chat.completions.create(model="gpt-4.1", messages=MESSAGES)  # type: ignore[arg-type]
    assert reply.choices[0].message.content == "Done."

    wire.stream(openai_chunks(Turn("Streamed."), openai_usage(400, 25)))
    # A client that did not ask for the usage chunk still gets its call metered.
    stream = await client.chat.completions.create(model="gpt-4.1", messages=MESSAGES,  # type: ignore[arg-type]
                                                  stream=True)
    text = "".join([chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices])
    assert text == "Streamed."

    _assert_key_swapped(wire, grant, "authorization", f"Bearer {REAL_KEY}")
    assert [request.path for request in wire.requests] == ["/v1/chat/completions"] * 2
    assert wire.requests[1].body["stream_options"] == {"include_usage": True}
    await gateway.settle(grant)
    assert [call.usage for call in grant.calls] == [Usage(300, 20, 256), Usage(400, 25)]
    price = profile_for("gpt-4.1")
    assert grant.cost == pytest.approx((price.cost(Usage(300, 20, 256)) or 0) + (price.cost(Usage(400, 25)) or 0))


async def test_openai_responses_whole_and_streamed(gateway: Gateway, wire: WireServer) -> None:
    grant = await gateway.grant("task-3", Upstream("openai-responses", wire.url + "/v1", REAL_KEY))
    client = _openai(grant)
    wire.answer(response("Done.", responses_usage(500, 40, cached=128)))
    reply = await client.responses.create(model="gpt-4.1", input="Fix the failing test.")
    assert reply.output_text == "Done."
    wire.stream(response_events("Streamed.", responses_usage(600, 50)))
    stream = await client.responses.create(model="gpt-4.1", input="Fix the failing test.", stream=True)
    kinds = [event.type async for event in stream]
    assert kinds[-1] == "response.completed"

    _assert_key_swapped(wire, grant, "authorization", f"Bearer {REAL_KEY}")
    await gateway.settle(grant)
    assert [call.usage for call in grant.calls] == [Usage(500, 40, 128), Usage(600, 50)]
    assert all(call.complete for call in grant.calls)


async def test_gemini_whole_and_streamed_with_the_token_in_the_header_or_the_query(gateway: Gateway,
                                                                                 wire: WireServer) -> None:
    grant = await gateway.grant("task-4", Upstream("gemini", wire.url, REAL_KEY),
                                pricing=Pricing(input=1.25, output=10.0))
    body = {"contents": [{"role": "user", "parts": [{"text": "Fix the failing test."}]}]}
    wire.answer({"candidates": [{"content": {"parts": [{"text": "Done."}]}, "finishReason": "STOP"}],
                 "usageMetadata": gemini_usage(70, 9)})
    wire.stream(gemini_chunks("Streamed reply.", gemini_usage(80, 12)))
    async with httpx.AsyncClient(base_url=grant.base_url) as client:
        whole = await client.post("/v1beta/models/gemini-2.5-pro:generateContent", json=body,
                                  headers={"x-goog-api-key": grant.token})
        streamed = await client.post("/v1beta/models/gemini-2.5-pro:streamGenerateContent",
                                     params={"alt": "sse", "key": grant.token}, json=body)
    assert whole.status_code == streamed.status_code == 200
    assert streamed.text.count("data: ") == 2 and REAL_KEY not in whole.text + streamed.text

    _assert_key_swapped(wire, grant, "x-goog-api-key", REAL_KEY)
    assert wire.requests[1].path == "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse"
    await gateway.settle(grant)
    assert [call.usage for call in grant.calls] == [Usage(70, 9), Usage(80, 12)]
    assert grant.cost == pytest.approx((150 * 1.25 + 21 * 10.0) / 1e6)


async def test_a_spent_budget_is_refused_in_the_providers_shape_before_the_upstream(gateway: Gateway,
                                                                                   wire: WireServer) -> None:
    grant = await gateway.grant("task-5", Upstream("anthropic", wire.url, REAL_KEY), Budget(max_tokens=100))
    client = _anthropic(grant)
    wire.answer(anthropic_message(Turn("Done."), anthropic_usage(90, 20)))
    await client.messages.create(model="claude-sonnet-4-5", max_tokens=10, messages=MESSAGES)  # type: ignore[arg-type]
    await gateway.settle(grant)
    assert grant.spent() is not None
    with pytest.raises(anthropic.BadRequestError) as refused:
        await client.messages.create(model="claude-sonnet-4-5", max_tokens=10,
                                     messages=MESSAGES)  # type: ignore[arg-type]
    assert refused.value.body == {"type": "error", "error": {"type": "invalid_request_error",
                                                             "message": refused.value.body["error"]["message"]}}
    assert "budget is spent (110 of 100 tokens)" in refused.value.message
    assert len(wire.requests) == 1 and len(grant.calls) == 1

    chat = await gateway.grant("task-6", Upstream("openai-chat", wire.url + "/v1", REAL_KEY), Budget(max_cost=0.0))
    with pytest.raises(openai.RateLimitError) as quota:
        await _openai(chat).chat.completions.create(model="gpt-4.1", messages=MESSAGES)  # type: ignore[arg-type]
    assert quota.value.code == "insufficient_quota" and quota.value.type == "insufficient_quota"
    assert quota.value.response.headers["x-should-retry"] == "false"
    assert len(wire.requests) == 1


async def test_a_cost_budget_refuses_a_model_it_cannot_price(gateway: Gateway, wire: WireServer) -> None:
    grant = await gateway.grant("task-7", Upstream("openai-chat", wire.url + "/v1", REAL_KEY), Budget(max_cost=5.0))
    with pytest.raises(openai.RateLimitError, match="knows no price for model 'house-model'"):
        await _openai(grant).chat.completions.create(model="house-model", messages=MESSAGES)  # type: ignore[arg-type]
    assert wire.requests == []


@pytest.mark.parametrize("revoked", [False, True], ids=["unknown", "revoked"])
async def test_an_unknown_or_revoked_token_gets_the_providers_401(gateway: Gateway, wire: WireServer,
                                                                 revoked: bool) -> None:
    claude = await gateway.grant("task-8", Upstream("anthropic", wire.url, REAL_KEY))
    codex = await gateway.grant("task-9", Upstream("openai-responses", wire.url + "/v1", REAL_KEY))
    if revoked:
        await gateway.revoke(claude)
        await gateway.revoke("task-9")
    else:
        claude.token = codex.token = "errand-gw-not-a-grant"
    with pytest.raises(anthropic.AuthenticationError) as refused:
        await _anthropic(claude).messages.create(model="claude-sonnet-4-5", max_tokens=10,
                                                 messages=MESSAGES)  # type: ignore[arg-type]
    assert refused.value.status_code == 401
    assert refused.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]
    assert ("revoked" in refused.value.message) is revoked
    with pytest.raises(openai.AuthenticationError) as openai_refused:
        await _openai(codex).responses.create(model="gpt-4.1", input="hi")
    assert openai_refused.value.code == "invalid_api_key"
    assert wire.requests == []


async def test_a_route_not_of_the_grants_protocol_is_refused(gateway: Gateway, wire: WireServer) -> None:
    grant = await gateway.grant("task-10", Upstream("anthropic", wire.url, REAL_KEY))
    async with httpx.AsyncClient(base_url=grant.base_url, headers={"x-api-key": grant.token}) as client:
        answers = [await client.post("/v1/chat/completions", json={}), await client.get("/v1/messages"),
                   await client.post("/v1/files", json={})]
    assert [answer.status_code for answer in answers] == [404, 404, 404]
    assert answers[0].json()["error"]["type"] == "not_found_error"
    assert wire.requests == [] and grant.calls == []


async def test_the_transcript_has_every_call_and_no_secret(gateway: Gateway, wire: WireServer) -> None:
    grant = await gateway.grant("task-11", Upstream("anthropic", wire.url, REAL_KEY), Budget(max_tokens=60))
    client = _anthropic(grant)
    wire.answer(anthropic_message(Turn(f"You said {grant.token}"), anthropic_usage(30, 10)))
    wire.stream(anthropic_events(Turn("second"), anthropic_usage(15, 5)))
    prompt = [{"role": "user", "content": f"My token is {grant.token} and the key is {REAL_KEY}"}]
    await client.messages.create(model="claude-sonnet-4-5", max_tokens=10, messages=prompt)  # type: ignore[arg-type]
    async with client.messages.stream(model="claude-sonnet-4-5", max_tokens=10,
                                      messages=MESSAGES) as stream:  # type: ignore[arg-type]
        await stream.get_final_message()
    with pytest.raises(anthropic.BadRequestError):
        await client.messages.create(model="claude-sonnet-4-5", max_tokens=10,
                                     messages=MESSAGES)  # type: ignore[arg-type]

    await gateway.settle(grant)
    text = grant.transcript.read_text()
    assert grant.token not in text and REAL_KEY not in text
    lines = [json.loads(line) for line in text.splitlines()]
    assert [(line["kind"], line["call"]) for line in lines] == [
        ("request", 1), ("reply", 1), ("request", 2), ("reply", 2), ("request", 3), ("refused", 3)]
    assert lines[0]["body"]["messages"][0]["content"] == "My token is [redacted] and the key is [redacted]"
    assert lines[1]["body"]["content"][0]["text"] == "You said [redacted]"
    assert lines[1]["usage"] == {"input_tokens": 30, "output_tokens": 10, "cache_read_tokens": 0,
                                 "cache_write_tokens": 0}
    assert "event: message_stop" in lines[3]["body"] and lines[3]["complete"] is True
    assert "budget is spent" in lines[5]["reason"]


@pytest.mark.faults
async def test_a_cut_stream_is_metered_for_what_arrived_and_reported(gateway: Gateway, wire: WireServer) -> None:
    grant = await gateway.grant("task-12", Upstream("anthropic", wire.url, REAL_KEY))
    events = anthropic_events(Turn("A reply that never ends"), anthropic_usage(250, 80))
    wire.stream(events, cut_after=3)  # message_start, the block's start, one delta: then the connection drops
    client = _anthropic(grant)
    with pytest.raises((anthropic.APIError, httpx.HTTPError)):
        async with client.messages.stream(model="claude-sonnet-4-5", max_tokens=100,
                                          messages=MESSAGES) as stream:  # type: ignore[arg-type]
            await stream.get_final_message()
    await gateway.settle(grant)
    (call,) = grant.calls
    assert call.usage == Usage(250, 1)  # the prompt, and the one output token message_start reports
    assert not call.complete and call.error is not None and "broke off" in call.error
    reply = json.loads(grant.transcript.read_text().splitlines()[-1])
    assert reply["complete"] is False and reply["error"] == call.error
    assert reply["body"].count("event: ") == 3


@pytest.mark.faults
async def test_a_stream_that_ends_early_but_cleanly_is_reported(gateway: Gateway, wire: WireServer) -> None:
    """A stream that closes without its last event, its framing intact, is still not complete."""
    grant = await gateway.grant("task-13", Upstream("openai-chat", wire.url + "/v1", REAL_KEY))
    events = openai_chunks(Turn("partial"), openai_usage(40, 5))
    wire.stream(events[:2])  # the text, then the end: no usage, no [DONE], its length as declared
    async with httpx.AsyncClient(base_url=grant.base_url) as client:
        answer = await client.post("/chat/completions", headers={"authorization": f"Bearer {grant.token}"},
                                   json={"model": "gpt-4.1", "messages": MESSAGES, "stream": True})
    assert answer.status_code == 200 and "partial" in answer.text
    await gateway.settle(grant)
    (call,) = grant.calls
    assert call.usage is None and not call.complete
    assert call.error == "the upstream's stream ended before its last event"


async def test_an_unreachable_upstream_is_a_bad_gateway_in_the_providers_shape(gateway: Gateway,
                                                                                closed_port_url: str) -> None:
    grant = await gateway.grant("task-14", Upstream("anthropic", closed_port_url, REAL_KEY))
    async with httpx.AsyncClient(base_url=grant.base_url) as client:
        answer = await client.post("/v1/messages", headers={"x-api-key": grant.token},
                                   json={"model": "claude-sonnet-4-5", "max_tokens": 1, "messages": MESSAGES})
    assert answer.status_code == 502 and answer.json()["error"]["type"] == "api_error"
    await gateway.settle(grant)
    (call,) = grant.calls
    assert call.status is None and not call.complete and "could not be reached" in (call.error or "")


@pytest.mark.faults
async def test_a_client_that_leaves_ends_its_call_and_no_call_is_left_waiting(gateway: Gateway,
                                                                             wire: WireServer) -> None:
    """A CLI killed while the provider is silent: the gateway stops waiting on the provider."""
    grant = await gateway.grant("task-17", Upstream("anthropic", wire.url, REAL_KEY))
    wire.queue(Hang())
    async with httpx.AsyncClient(base_url=grant.base_url, timeout=httpx.Timeout(60, read=0.5)) as client:
        with pytest.raises(httpx.ReadTimeout):
            await client.post("/v1/messages", headers={"x-api-key": grant.token},
                              json={"model": "claude-sonnet-4-5", "max_tokens": 1, "messages": MESSAGES})
    async with asyncio.timeout(120):  # a bound, not a timing: without the client, the call must still end
        await gateway.settle(grant)
    (call,) = grant.calls
    assert call.error == "the client left before the upstream answered" and not call.complete
    reply = json.loads(grant.transcript.read_text().splitlines()[-1])
    assert reply["kind"] == "reply" and reply["error"] == call.error


async def test_claude_codes_query_is_forwarded_and_its_connection_sends_without_delay(gateway: Gateway,
                                                                                      wire: WireServer) -> None:
    """Claude Code calls /v1/messages?beta=true over a kept-alive connection. Without TCP_NODELAY
    on the gateway's side, each reply's last write waited on the client's delayed ACK (~40 ms a call)."""
    grant = await gateway.grant("task-18", Upstream("anthropic", wire.url, REAL_KEY))
    wire.answer(anthropic_message(Turn("ok"), anthropic_usage(1, 1)))
    async with httpx.AsyncClient(base_url=grant.base_url) as client:
        answer = await client.post("/v1/messages?beta=true", headers={"x-api-key": grant.token},
                                   json={"model": "claude-sonnet-4-5", "max_tokens": 1, "messages": MESSAGES})
        assert answer.status_code == 200
        sockets = [connection.transport.get_extra_info("socket")
                   for connection in gateway._server.server_state.connections]
        assert sockets and all(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) for sock in sockets)
    assert wire.requests[0].path == "/v1/messages?beta=true"
