"""Both adapters, through the real SDKs, against loopback providers that misbehave as the real ones do.

Each test runs for OpenAI and Anthropic, streamed and not: a reply is a tool
call the adapter can run or one that says why not; a failure comes back as a
:class:`ModelError` classified for the loop (retryable, retry-after, context
overflow), from exactly one request, since the SDKs' own retries are off.
"""

from __future__ import annotations

from typing import Any

import pytest

from errand.models import AnthropicModel, Message, ModelError, OpenAIModel, Tool, ToolCall, Usage
from errand.models.profiles import ModelProfile, Pricing
from models.provider_wire import (
    Protocol,
    Turn,
    anthropic_context_error,
    anthropic_error,
    anthropic_events,
    anthropic_message,
    anthropic_usage,
    openai_chunks,
    openai_completion,
    openai_context_error,
    openai_rate_limit,
    openai_server_error,
    openai_usage,
)
from models.wire import Json, Stream, WireServer

WRITE = Tool("write_file", "Write a file", {
    "type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
    "required": ["path", "content"]})
PRICES = ModelProfile(16_384, Pricing(input=3.0, output=15.0, cache_read=0.3, cache_write=3.75))
VARIANTS = [("openai", False), ("openai", True), ("anthropic", False), ("anthropic", True)]
HELLO = [Message("system", "You write files."), Message("user", "Write notes.txt.")]


def model_for(server: WireServer, protocol: Protocol, streaming: bool, **options: Any) -> OpenAIModel | AnthropicModel:
    if protocol == "openai":
        return OpenAIModel("test-model", base_url=f"{server.url}/v1", api_key="k", stream=streaming, **options)
    return AnthropicModel("test-model", base_url=server.url, api_key="k", stream=streaming, **options)


def reply(protocol: Protocol, streaming: bool, turn: Turn, usage: dict[str, Any] | None = None) -> Json | Stream:
    if protocol == "openai":
        usage = usage or openai_usage(100, 10)
        return Stream(openai_chunks(turn, usage)) if streaming else Json(openai_completion(turn, usage))
    usage = usage or anthropic_usage(100, 10)
    return Stream(anthropic_events(turn, usage)) if streaming else Json(anthropic_message(turn, usage))


def variants() -> Any:
    return pytest.mark.parametrize(("protocol", "streaming"), VARIANTS, ids=[f"{p}-{'sse' if s else 'json'}"
                                                                             for p, s in VARIANTS])


@variants()
async def test_a_call_whose_arguments_are_not_json_comes_back_malformed_not_raised(
        wire: WireServer, protocol: Protocol, streaming: bool) -> None:
    if protocol == "anthropic" and not streaming:
        pytest.skip("the Messages API sends a non-streamed tool input as JSON already parsed")
    wire.queue(reply(protocol, streaming, Turn(calls=[("c1", "write_file", '{"path": "notes.txt", "content": "a'),
                                                      ("c2", "write_file", '{"path": "b.txt", "content": "b"}')])))
    result = await model_for(wire, protocol, streaming).complete(HELLO, [WRITE])
    broken, whole = result.message.tool_calls
    assert broken.name == "write_file" and broken.arguments == {} and "not valid JSON" in (broken.malformed or "")
    assert whole == ToolCall("c2", "write_file", {"path": "b.txt", "content": "b"})


@variants()
async def test_429_is_retryable_with_the_wait_the_provider_asked_for(
        wire: WireServer, protocol: Protocol, streaming: bool) -> None:
    wire.queue(openai_rate_limit("7") if protocol == "openai" else anthropic_error(
        429, "rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit",
        {"retry-after": "7"}))
    with pytest.raises(ModelError) as caught:
        await model_for(wire, protocol, streaming).complete(HELLO, [WRITE])
    assert (caught.value.status, caught.value.retryable, caught.value.retry_after) == (429, True, 7.0)
    assert len(wire.requests) == 1  # the SDK did not retry on its own


@variants()
async def test_5xx_and_overload_are_retryable_and_a_bad_request_is_not(
        wire: WireServer, protocol: Protocol, streaming: bool) -> None:
    model = model_for(wire, protocol, streaming)
    wire.queue(openai_server_error() if protocol == "openai" else anthropic_error(529, "overloaded_error",
                                                                                   "Overloaded"))
    wire.queue(Json({"error": {"type": "invalid_request_error", "message": "tools.0: bad schema"}}, 400))
    with pytest.raises(ModelError) as server:
        await model.complete(HELLO, [WRITE])
    with pytest.raises(ModelError) as bad:
        await model.complete(HELLO, [WRITE])
    assert server.value.retryable and server.value.retry_after is None
    assert not bad.value.retryable and bad.value.code == "model_error"
    assert len(wire.requests) == 2


@variants()
async def test_a_context_overflow_is_named_with_the_window(
        wire: WireServer, protocol: Protocol, streaming: bool) -> None:
    wire.queue(openai_context_error(16_384, 17_210) if protocol == "openai"
               else anthropic_context_error(16_384, 17_210))
    with pytest.raises(ModelError) as caught:
        await model_for(wire, protocol, streaming).complete(HELLO, [WRITE])
    assert (caught.value.code, caught.value.context_window, caught.value.retryable) == (
        "context_length_exceeded", 16_384, False)


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
async def test_a_stream_answering_a_request_for_none_is_named_not_an_attribute_error(
        wire: WireServer, protocol: Protocol) -> None:
    """A 200 whose body is not the JSON asked for (a stream here; an HTML page at a wrong base URL is
    the same): the SDK hands back its text, which must come back as a ModelError that says what came."""
    wire.queue(reply(protocol, True, Turn("Notes: nothing.")))
    with pytest.raises(ModelError) as caught:
        await model_for(wire, protocol, False).complete(HELLO, [WRITE])
    assert caught.value.code == "not_a_reply" and not caught.value.retryable
    assert "answered with something that is not" in caught.value.message and "data:" in caught.value.message


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
@pytest.mark.parametrize("how", ["dropped", "ended"])
async def test_a_stream_cut_mid_tool_call_is_retryable_and_yields_no_call(
        wire: WireServer, protocol: Protocol, how: str) -> None:
    turn = Turn(calls=[("c1", "write_file", {"path": "notes.txt", "content": "x" * 90})])
    events = reply(protocol, True, turn)
    assert isinstance(events, Stream)
    middle = next(i for i, (_, data) in enumerate(events.events) if "arguments" in str(data)
                  or "partial_json" in str(data)) + 1  # after the first piece of the arguments
    # "dropped": the connection breaks mid-body; "ended": the body ends early but cleanly.
    wire.queue(Stream(events.events, cut_after=middle) if how == "dropped" else Stream(events.events[:middle]))
    with pytest.raises(ModelError) as caught:
        await model_for(wire, protocol, True).complete(HELLO, [WRITE])
    assert caught.value.retryable
    assert caught.value.code in ("stream_cut", "model_unreachable")


@variants()
async def test_usage_splits_cached_tokens_and_cost_follows_the_price_table(
        wire: WireServer, protocol: Protocol, streaming: bool) -> None:
    if protocol == "openai":
        usage = openai_usage(5000, 200, cached=4096)  # OpenAI counts cached tokens inside prompt_tokens
    else:
        usage = anthropic_usage(800, 200, read=4096, write=104)  # Anthropic counts them beside input_tokens
    wire.queue(reply(protocol, streaming, Turn("done"), usage))
    result = await model_for(wire, protocol, streaming, profile=PRICES).complete(HELLO, [])
    if protocol == "openai":
        assert result.usage == Usage(5000, 200, cache_read_tokens=4096)
        by_hand = (904 * 3.0 + 4096 * 0.3 + 200 * 15.0) / 1e6
    else:
        assert result.usage == Usage(5000, 200, cache_read_tokens=4096, cache_write_tokens=104)
        by_hand = (800 * 3.0 + 4096 * 0.3 + 104 * 3.75 + 200 * 15.0) / 1e6
    assert result.cost == pytest.approx(by_hand)


async def test_anthropic_requests_mark_the_system_prompt_and_the_messages_the_caller_marks(
        wire: WireServer) -> None:
    wire.queue(reply("anthropic", False, Turn("ok")))
    wire.queue(reply("anthropic", False, Turn("ok")))
    call = ToolCall("t1", "write_file", {"path": "a", "content": "b"})
    conversation = [HELLO[0], Message("user", "task", cache=True), Message("assistant", "", [call]),
                    Message("tool", "wrote", tool_call_id="t1", cache=True), Message("user", "go on")]
    await model_for(wire, "anthropic", False).complete(conversation, [WRITE])
    await model_for(wire, "anthropic", False, cache=False).complete(conversation, [WRITE])
    marked, plain = (r.body for r in wire.requests)
    assert marked["system"] == [{"type": "text", "text": "You write files.", "cache_control": {"type": "ephemeral"}}]
    assert marked["messages"][0]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert marked["messages"][2]["content"] == [
        {"type": "tool_result", "tool_use_id": "t1", "content": "wrote", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "go on"}]
    assert "cache" not in str(plain) and plain["system"] == "You write files."
