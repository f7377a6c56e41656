"""The gateway's knowledge of each wire, row by row, without a socket."""

from __future__ import annotations

import json

import pytest

from errand.gateway.protocols import (
    error_body,
    error_status,
    protocol_guess,
    route_of,
    usage_of_event,
    usage_of_reply,
    with_stream_usage,
)
from errand.models import Usage


@pytest.mark.parametrize(("protocol", "method", "path", "generates"), [
    ("anthropic", "POST", "/v1/messages", True),
    ("anthropic", "POST", "/v1/messages/count_tokens", False),
    ("anthropic", "GET", "/v1/models", False),
    ("openai-chat", "POST", "/v1/chat/completions", True),
    ("openai-responses", "POST", "/v1/responses", True),
    ("openai-responses", "GET", "/v1/models/gpt-5", False),
    ("gemini", "POST", "/v1beta/models/gemini-2.5-pro:streamGenerateContent", True),
    ("gemini", "POST", "/v1beta/models/gemini-2.5-pro:generateContent", True),
    ("gemini", "POST", "/v1beta/models/gemini-2.5-pro:countTokens", False),
])
def test_each_protocol_serves_its_own_routes(protocol: str, method: str, path: str, generates: bool) -> None:
    route = route_of(protocol, method, path)  # type: ignore[arg-type]
    assert route is not None and route.generates is generates


@pytest.mark.parametrize(("protocol", "method", "path"), [
    ("anthropic", "POST", "/v1/chat/completions"),       # another provider's route
    ("anthropic", "GET", "/v1/messages"),                # the wrong method
    ("anthropic", "POST", "/v1/messages/batches"),       # a route errand does not carry
    ("openai-chat", "POST", "/v1/responses"),            # the other OpenAI wire
    ("openai-chat", "POST", "/chat/completions"),        # outside the base path
    ("openai-responses", "POST", "/v1/files"),
    ("gemini", "POST", "/v1beta/models/x:embedContent"),
    ("gemini", "POST", "/v1beta/tunedModels/x:generateContent"),
    ("openai-chat", "POST", "/v1/chat/completions/../files"),
])
def test_a_route_of_no_protocol_is_refused(protocol: str, method: str, path: str) -> None:
    assert route_of(protocol, method, path) is None  # type: ignore[arg-type]


def test_refusals_come_in_each_providers_own_shape() -> None:
    assert error_body("anthropic", 401, "authentication", "m") == {
        "type": "error", "error": {"type": "authentication_error", "message": "m"}}
    assert error_body("openai-chat", 429, "budget", "m") == {
        "error": {"message": "m", "type": "insufficient_quota", "param": None, "code": "insufficient_quota"}}
    assert error_body("gemini", 429, "budget", "m") == {
        "error": {"code": 429, "message": "m", "status": "RESOURCE_EXHAUSTED"}}
    assert [error_status(p, "budget") for p in ("anthropic", "openai-responses", "gemini")] == [400, 429, 429]
    assert error_status("openai-chat", "authentication") == 401


def test_an_unknown_tokens_refusal_is_shaped_by_its_path_or_header() -> None:
    assert protocol_guess("/v1/messages", {}) == "anthropic"
    assert protocol_guess("/x", {"x-api-key": "t"}) == "anthropic"
    assert protocol_guess("/v1beta/models/g:generateContent", {}) == "gemini"
    assert protocol_guess("/v1/responses", {}) == "openai-responses"
    assert protocol_guess("/v1/chat/completions", {"authorization": "Bearer t"}) == "openai-chat"


def test_usage_of_whole_replies() -> None:
    assert usage_of_reply("anthropic", {"usage": {"input_tokens": 10, "output_tokens": 5,
                                                  "cache_read_input_tokens": 100,
                                                  "cache_creation_input_tokens": 20}}) == Usage(130, 5, 100, 20)
    assert usage_of_reply("openai-chat", {"usage": {"prompt_tokens": 50, "completion_tokens": 7,
                                                    "prompt_tokens_details": {"cached_tokens": 32}}}) == \
        Usage(50, 7, 32)
    assert usage_of_reply("openai-responses", {"usage": {"input_tokens": 40, "output_tokens": 9,
                                                         "input_tokens_details": {"cached_tokens": 8}}}) == \
        Usage(40, 9, 8)
    assert usage_of_reply("gemini", {"usageMetadata": {"promptTokenCount": 12, "candidatesTokenCount": 3,
                                                       "thoughtsTokenCount": 4}}) == Usage(12, 7)
    assert usage_of_reply("openai-chat", {"choices": []}) is None
    assert usage_of_reply("anthropic", "not json") is None


def test_anthropic_stream_usage_is_the_start_then_the_cumulative_deltas() -> None:
    start = usage_of_event("anthropic", json.dumps({"type": "message_start", "message": {"usage": {
        "input_tokens": 10, "output_tokens": 1, "cache_read_input_tokens": 30}}}), None)
    assert start.usage == Usage(40, 1, 30) and not start.final
    delta = usage_of_event("anthropic", json.dumps({"type": "message_delta", "usage": {"output_tokens": 25}}),
                           start.usage)
    assert delta.usage == Usage(40, 25, 30)
    assert usage_of_event("anthropic", '{"type": "message_stop"}', delta.usage).final


def test_the_other_streams_usage_and_their_last_events() -> None:
    chunk = usage_of_event("openai-chat", json.dumps({"choices": [], "usage": {"prompt_tokens": 5,
                                                                               "completion_tokens": 2}}), None)
    assert chunk.usage == Usage(5, 2) and not chunk.final
    assert usage_of_event("openai-chat", "[DONE]", chunk.usage).final
    done = usage_of_event("openai-responses", json.dumps({"type": "response.completed", "response": {
        "usage": {"input_tokens": 3, "output_tokens": 4}}}), None)
    assert done.usage == Usage(3, 4) and done.final
    last = usage_of_event("gemini", json.dumps({"candidates": [{"finishReason": "STOP"}],
                                                "usageMetadata": {"promptTokenCount": 8,
                                                                  "candidatesTokenCount": 2}}), None)
    assert last.usage == Usage(8, 2) and last.final


def test_a_streamed_chat_request_is_asked_for_its_usage() -> None:
    assert with_stream_usage("openai-chat", {"stream": True, "model": "m"}) == {
        "stream": True, "model": "m", "stream_options": {"include_usage": True}}
    assert with_stream_usage("openai-chat", {"stream": True, "stream_options": {"include_usage": True}}) is None
    assert with_stream_usage("openai-chat", {"stream": False}) is None
    assert with_stream_usage("anthropic", {"stream": True}) is None


def test_a_reply_limit_is_only_ever_lowered_and_added_only_where_every_model_takes_it() -> None:
    from errand.gateway.protocols import SAFE_LIMIT, with_output_cap

    chat = {"model": "gpt-4.1", "messages": []}
    assert with_output_cap("openai-chat", chat, 1_000_000) == (chat, 0)  # the model's own most stands
    assert with_output_cap("openai-chat", chat, SAFE_LIMIT) == ({**chat, "max_completion_tokens": SAFE_LIMIT},
                                                                SAFE_LIMIT)
    asked = {**chat, "max_tokens": 64_000}
    assert with_output_cap("openai-chat", asked, 1_000_000) == (asked, 64_000)  # its own name, not raised
    assert with_output_cap("openai-chat", {**asked, "max_completion_tokens": 9}, 1_000_000) == (
        {**chat, "max_completion_tokens": 9}, 9)  # two limits: one written, the lower
    gemini = {"contents": [], "generationConfig": {"maxOutputTokens": 8000, "candidateCount": 4}}
    assert with_output_cap("gemini", gemini, 1000) == (
        {"contents": [], "generationConfig": {"maxOutputTokens": 250, "candidateCount": 4}}, 1000)
    assert with_output_cap("gemini", {"generation_config": {}}, 1000) is None
    assert with_output_cap("anthropic", [1, 2], 1000) is None
    assert with_output_cap("openai-chat", {**chat, "n": 5}, 4) is None  # more choices than tokens
