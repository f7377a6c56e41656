"""The real ``openai`` SDK, driven through OpenAIModel, against a loopback OpenAI-wire server."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from errand.models import Message, ModelError, OpenAIModel, Tool, ToolCall
from models.wire import WireServer

RUN = Tool(
    "run", "Run a shell command",
    {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
)


def completion(message: dict[str, Any], finish_reason: str, prompt: int = 12, completion: int = 5) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "test-model",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
    }


def tool_call_completion(call_id: str = "call_abc", arguments: str = '{"command": "pytest -q"}') -> dict[str, Any]:
    call = {"id": call_id, "type": "function", "function": {"name": "run", "arguments": arguments}}
    return completion({"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls")


def text_completion(text: str = "The test passes now.") -> dict[str, Any]:
    return completion({"role": "assistant", "content": text}, "stop", prompt=40, completion=8)


def model_for(server: WireServer, **options: Any) -> OpenAIModel:
    return OpenAIModel("test-model", base_url=f"{server.url}/v1", api_key="sk-test", max_retries=0, **options)


async def test_tool_call_round_trip(wire: WireServer) -> None:
    wire.answer(tool_call_completion())
    wire.answer(text_completion())
    model = model_for(wire)
    conversation = [Message("system", "You fix bugs."), Message("user", "Fix the failing test.")]

    first = await model.complete(conversation, [RUN])
    conversation += [first.message, Message("tool", "1 passed", tool_call_id="call_abc")]
    second = await model.complete(conversation, [RUN])

    assert first.message == Message("assistant", "", [ToolCall("call_abc", "run", {"command": "pytest -q"})])
    assert first.raw_stop == "tool_calls" and first.cost is None
    assert (first.usage.input_tokens, first.usage.output_tokens) == (12, 5)
    assert second.message == Message("assistant", "The test passes now.") and second.raw_stop == "stop"
    await model.aclose()

    request, follow_up = (r.body for r in wire.requests)
    assert [r.path for r in wire.requests] == ["/v1/chat/completions"] * 2
    assert wire.requests[0].headers["authorization"] == "Bearer sk-test"
    assert request["model"] == "test-model"
    assert request["messages"] == [
        {"role": "system", "content": "You fix bugs."}, {"role": "user", "content": "Fix the failing test."},
    ]
    assert request["tools"] == [{"type": "function", "function": {
        "name": "run", "description": "Run a shell command", "parameters": RUN.parameters,
    }}]
    assistant, tool_result = follow_up["messages"][2:]
    assert assistant["tool_calls"][0]["id"] == "call_abc"
    assert json.loads(assistant["tool_calls"][0]["function"]["arguments"]) == {"command": "pytest -q"}
    assert tool_result == {"role": "tool", "tool_call_id": "call_abc", "content": "1 passed"}


async def test_no_tools_sends_no_tools_array(wire: WireServer) -> None:
    wire.answer(text_completion("hello"))
    reply = await model_for(wire).complete([Message("user", "hi")], [])
    assert reply.message.content == "hello"
    assert "tools" not in wire.requests[0].body


async def test_arguments_that_are_not_a_json_object_make_a_malformed_call_not_an_error(wire: WireServer) -> None:
    wire.answer(tool_call_completion(arguments='["pytest"]'))
    call = (await model_for(wire).complete([Message("user", "go")], [RUN])).message.tool_calls[0]
    assert (call.id, call.name, call.arguments) == ("call_abc", "run", {})
    assert call.malformed == "its arguments are not a JSON object: '[\"pytest\"]'"


@pytest.mark.parametrize(("status", "error_type"), [(401, "invalid_api_key"), (500, "server_error")])
async def test_http_errors_become_model_errors_with_status(wire: WireServer, status: int, error_type: str) -> None:
    wire.answer({"error": {"message": "nope", "type": error_type, "code": error_type}}, status=status)
    with pytest.raises(ModelError, match=f"answered HTTP {status}") as caught:
        await model_for(wire).complete([Message("user", "hi")], [])
    assert (caught.value.provider, caught.value.status, caught.value.code) == ("openai", status, "model_error")
    assert len(wire.requests) == 1  # max_retries=0: no retry


async def test_retries_are_configurable(wire: WireServer) -> None:
    wire.answer({"error": {"message": "busy", "type": "server_error"}}, status=500)
    wire.answer(text_completion("after a retry"))
    model = OpenAIModel("test-model", base_url=f"{wire.url}/v1", api_key="sk-test", max_retries=1)
    assert (await model.complete([Message("user", "hi")], [])).message.content == "after a retry"
    assert len(wire.requests) == 2


async def test_unreachable_server_is_a_model_error_without_status(closed_port_url: str) -> None:
    model = OpenAIModel("test-model", base_url=f"{closed_port_url}/v1", api_key="sk-test", max_retries=0, timeout=5)
    with pytest.raises(ModelError, match="could not be reached") as caught:
        await model.complete([Message("user", "hi")], [])
    assert caught.value.status is None


async def test_settings_precedence(
    wire_servers: Callable[[], WireServer], monkeypatch: pytest.MonkeyPatch,
) -> None:
    sdk_server, errand_server, explicit_server = wire_servers(), wire_servers(), wire_servers()
    for server in (sdk_server, errand_server, explicit_server):
        server.answer(text_completion())
    hello = [Message("user", "hi")]

    monkeypatch.setenv("OPENAI_BASE_URL", f"{sdk_server.url}/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "sdk-key")
    await OpenAIModel("m", max_retries=0).complete(hello, [])

    monkeypatch.setenv("ERRAND_OPENAI_BASE_URL", f"{errand_server.url}/v1")
    monkeypatch.setenv("ERRAND_OPENAI_API_KEY", "errand-key")
    await OpenAIModel("m", max_retries=0).complete(hello, [])

    await OpenAIModel("m", base_url=f"{explicit_server.url}/v1", api_key="explicit-key", max_retries=0).complete(
        hello, [],
    )

    assert sdk_server.requests[0].headers["authorization"] == "Bearer sdk-key"
    assert errand_server.requests[0].headers["authorization"] == "Bearer errand-key"
    assert explicit_server.requests[0].headers["authorization"] == "Bearer explicit-key"
    assert all(len(s.requests) == 1 for s in (sdk_server, errand_server, explicit_server))
