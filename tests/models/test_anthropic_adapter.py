"""The real ``anthropic`` SDK, driven through AnthropicModel, against a loopback Messages-API server."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from errand.models import AnthropicModel, Message, ModelError, Tool, ToolCall
from models.wire import Recorded, WireServer

RUN = Tool(
    "run", "Run a shell command",
    {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
)


def message(content: list[dict[str, Any]], stop_reason: str, **usage: int) -> dict[str, Any]:
    return {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "test-model",
        "content": content, "stop_reason": stop_reason, "stop_sequence": None,
        "usage": {"input_tokens": 20, "output_tokens": 7, **usage},
    }


def tool_use_message() -> dict[str, Any]:
    return message([
        {"type": "text", "text": "Let me run the tests."},
        {"type": "tool_use", "id": "toolu_1", "name": "run", "input": {"command": "pytest -q"}},
        {"type": "tool_use", "id": "toolu_2", "name": "run", "input": {"command": "git status"}},
    ], "tool_use", cache_read_input_tokens=100)


def text_message(text: str = "Fixed.") -> dict[str, Any]:
    return message([{"type": "text", "text": text}], "end_turn")


def credential(request: Recorded) -> str:
    """The key a request carried: SDK versions differ on ``x-api-key`` versus a bearer token."""
    return request.headers.get("x-api-key") or request.headers["authorization"].removeprefix("Bearer ")


def model_for(server: WireServer, **options: Any) -> AnthropicModel:
    return AnthropicModel("test-model", base_url=server.url, api_key="sk-ant-test", max_retries=0, **options)


async def test_tool_use_round_trip(wire: WireServer) -> None:
    wire.answer(tool_use_message())
    wire.answer(text_message())
    model = model_for(wire, max_tokens=1000)
    conversation = [
        Message("system", "You fix bugs."), Message("user", "Fix the failing test."),
        Message("system", "Project rules: run pytest."),
    ]

    first = await model.complete(conversation, [RUN])
    conversation += [
        first.message,
        Message("tool", "1 passed", tool_call_id="toolu_1"),
        Message("tool", "clean", tool_call_id="toolu_2"),
        Message("user", "Also check the docs."),
    ]
    second = await model.complete(conversation, [RUN])
    await model.aclose()

    assert first.message == Message("assistant", "Let me run the tests.", [
        ToolCall("toolu_1", "run", {"command": "pytest -q"}), ToolCall("toolu_2", "run", {"command": "git status"}),
    ])
    assert first.raw_stop == "tool_use" and first.cost is None
    assert (first.usage.input_tokens, first.usage.output_tokens) == (120, 7)  # cached prompt tokens count
    assert second.message == Message("assistant", "Fixed.") and second.raw_stop == "end_turn"

    assert [r.path for r in wire.requests] == ["/v1/messages"] * 2
    assert credential(wire.requests[0]) == "sk-ant-test"
    request, follow_up = (r.body for r in wire.requests)
    assert request["model"] == "test-model" and request["max_tokens"] == 1000
    # The system prompt is the stable prefix (after the tools) and carries the cache mark.
    assert request["system"] == [{"type": "text", "text": "You fix bugs.\n\nProject rules: run pytest.",
                                  "cache_control": {"type": "ephemeral"}}]
    assert request["messages"] == [{"role": "user", "content": [{"type": "text", "text": "Fix the failing test."}]}]
    assert request["tools"] == [
        {"name": "run", "description": "Run a shell command", "input_schema": RUN.parameters},
    ]
    assert follow_up["messages"][1:] == [
        {"role": "assistant", "content": [
            {"type": "text", "text": "Let me run the tests."},
            {"type": "tool_use", "id": "toolu_1", "name": "run", "input": {"command": "pytest -q"}},
            {"type": "tool_use", "id": "toolu_2", "name": "run", "input": {"command": "git status"}},
        ]},
        # Both results and the person's note share one user turn: the API wants turns to alternate.
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "1 passed"},
            {"type": "tool_result", "tool_use_id": "toolu_2", "content": "clean"},
            {"type": "text", "text": "Also check the docs."},
        ]},
    ]


async def test_tool_calls_without_text_send_no_empty_text_block(wire: WireServer) -> None:
    wire.answer(text_message())
    call = ToolCall("toolu_9", "run", {"command": "ls"})
    conversation = [
        Message("user", "go"), Message("assistant", "", [call]), Message("tool", "a.py", tool_call_id="toolu_9"),
    ]
    await model_for(wire).complete(conversation, [])
    body = wire.requests[0].body
    assert body["messages"][1]["content"] == [
        {"type": "tool_use", "id": "toolu_9", "name": "run", "input": {"command": "ls"}},
    ]
    assert "system" not in body and "tools" not in body


@pytest.mark.parametrize(("status", "error_type"), [(401, "authentication_error"), (500, "api_error")])
async def test_http_errors_become_model_errors_with_status(wire: WireServer, status: int, error_type: str) -> None:
    wire.answer({"type": "error", "error": {"type": error_type, "message": "nope"}}, status=status)
    with pytest.raises(ModelError, match=f"answered HTTP {status}") as caught:
        await model_for(wire).complete([Message("user", "hi")], [])
    assert (caught.value.provider, caught.value.status, caught.value.code) == ("anthropic", status, "model_error")
    assert len(wire.requests) == 1  # max_retries=0: no retry


async def test_unreachable_server_is_a_model_error_without_status(closed_port_url: str) -> None:
    model = AnthropicModel("test-model", base_url=closed_port_url, api_key="k", max_retries=0, timeout=5)
    with pytest.raises(ModelError, match="could not be reached") as caught:
        await model.complete([Message("user", "hi")], [])
    assert caught.value.status is None


async def test_settings_precedence(
    wire_servers: Callable[[], WireServer], monkeypatch: pytest.MonkeyPatch,
) -> None:
    sdk_server, errand_server, explicit_server = wire_servers(), wire_servers(), wire_servers()
    for server in (sdk_server, errand_server, explicit_server):
        server.answer(text_message())
    hello = [Message("user", "hi")]

    monkeypatch.setenv("ANTHROPIC_BASE_URL", sdk_server.url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sdk-key")
    await AnthropicModel("m", max_retries=0).complete(hello, [])

    monkeypatch.setenv("ERRAND_ANTHROPIC_BASE_URL", errand_server.url)
    monkeypatch.setenv("ERRAND_ANTHROPIC_API_KEY", "errand-key")
    await AnthropicModel("m", max_retries=0).complete(hello, [])

    await AnthropicModel("m", base_url=explicit_server.url, api_key="explicit-key", max_retries=0).complete(hello, [])

    assert credential(sdk_server.requests[0]) == "sdk-key"
    assert credential(errand_server.requests[0]) == "errand-key"
    assert credential(explicit_server.requests[0]) == "explicit-key"
    assert all(len(s.requests) == 1 for s in (sdk_server, errand_server, explicit_server))


async def test_missing_key_is_a_model_error(wire: WireServer) -> None:
    model = AnthropicModel("m", base_url=wire.url, max_retries=0)
    with pytest.raises(ModelError, match="ERRAND_ANTHROPIC_API_KEY or ANTHROPIC_API_KEY") as caught:
        await model.complete([Message("user", "hi")], [])
    assert caught.value.provider == "anthropic"
    assert wire.requests == []
