"""Models behind the OpenAI chat-completions API, through the official ``openai`` SDK.

This also serves every OpenAI-compatible server (vLLM, Ollama, llama.cpp,
LM Studio, OpenRouter): point ``base_url`` at it. Settings come from the
arguments, then ``ERRAND_OPENAI_BASE_URL`` / ``ERRAND_OPENAI_API_KEY``, then the
SDK's own ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import openai
from openai.types.chat import ChatCompletion

from errand.models._settings import resolve
from errand.models.errors import ModelError
from errand.models.protocol import Message, Reply, Tool, ToolCall, Usage

__all__ = ["OpenAIModel"]

_PROVIDER = "openai"


class OpenAIModel:
    """A chat-completions model with function calling, e.g. ``OpenAIModel("gpt-4.1")``.

    ``max_retries`` is the SDK's retry count for rate limits, 5xx and dropped
    connections; ``timeout`` (seconds) is the SDK's per-request timeout.
    """

    def __init__(
        self, model: str, *, base_url: str | None = None, api_key: str | None = None,
        max_retries: int = 2, timeout: float | None = None,
    ) -> None:
        self.name = f"{_PROVIDER}:{model}"
        self.model = model
        options: dict[str, Any] = {"max_retries": max_retries}
        if timeout is not None:
            options["timeout"] = timeout
        try:
            self._client = openai.AsyncOpenAI(
                base_url=resolve(base_url, "ERRAND_OPENAI_BASE_URL"),
                api_key=resolve(api_key, "ERRAND_OPENAI_API_KEY"),
                **options,
            )
        except openai.OpenAIError as error:
            raise ModelError(
                f"cannot set up the OpenAI client: {error}. Set ERRAND_OPENAI_API_KEY or OPENAI_API_KEY "
                "(any non-empty value for a local server that needs no key)",
                provider=_PROVIDER,
            ) from error

    async def aclose(self) -> None:
        """Close the SDK client's connection pool."""
        await self._client.close()

    async def complete(self, messages: Sequence[Message], tools: Sequence[Tool]) -> Reply:
        request: dict[str, Any] = {"model": self.model, "messages": [_wire_message(m) for m in messages]}
        if tools:
            request["tools"] = [_wire_tool(tool) for tool in tools]
        try:
            response = await self._client.chat.completions.create(**request)
        except openai.APIStatusError as error:
            raise ModelError(
                f"{self.name} answered HTTP {error.status_code}: {error.message}",
                provider=_PROVIDER, status=error.status_code,
            ) from error
        except openai.OpenAIError as error:
            raise ModelError(f"{self.name} could not be reached: {error}", provider=_PROVIDER) from error
        return self._reply(response)

    def _reply(self, response: ChatCompletion) -> Reply:
        if not response.choices:
            raise ModelError(f"{self.name} returned no choices", provider=_PROVIDER)
        choice = response.choices[0]
        calls = [_tool_call(self.name, call) for call in choice.message.tool_calls or []]
        usage = response.usage
        return Reply(
            Message("assistant", choice.message.content or "", calls),
            Usage(usage.prompt_tokens, usage.completion_tokens) if usage else Usage(),
            cost=None,
            raw_stop=choice.finish_reason or "",
        )


def _wire_message(message: Message) -> dict[str, Any]:
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    if message.role != "assistant" or not message.tool_calls:
        return {"role": message.role, "content": message.content}
    return {
        "role": "assistant",
        # null, not "": some OpenAI-compatible servers reject an empty string beside tool calls.
        "content": message.content or None,
        "tool_calls": [_wire_tool_call(call) for call in message.tool_calls],
    }


def _wire_tool_call(call: ToolCall) -> dict[str, Any]:
    return {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": json.dumps(call.arguments)}}


def _wire_tool(tool: Tool) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {"name": tool.name, "description": tool.description, "parameters": tool.parameters},
    }


def _tool_call(model_name: str, call: Any) -> ToolCall:
    if call.type != "function":
        raise ModelError(f"{model_name} made a {call.type!r} tool call; only function tools are offered",
                         provider=_PROVIDER)
    try:
        arguments = json.loads(call.function.arguments or "{}")
    except json.JSONDecodeError:
        arguments = None
    if not isinstance(arguments, dict):
        raise ModelError(
            f"{model_name} called {call.function.name!r} with arguments that are not a JSON object: "
            f"{call.function.arguments[:200]!r}",
            provider=_PROVIDER, code="bad_tool_arguments",
        )
    return ToolCall(call.id, call.function.name, arguments)
