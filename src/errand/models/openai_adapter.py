"""Models behind the OpenAI chat-completions API, through the official ``openai`` SDK.

This also serves every OpenAI-compatible server (vLLM, Ollama, llama.cpp,
LM Studio, OpenRouter): point ``base_url`` at it. Settings come from the
arguments, then ``ERRAND_OPENAI_BASE_URL`` / ``ERRAND_OPENAI_API_KEY``, then the
SDK's own ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import openai
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from errand.models._failures import http_failure, not_a_reply, transport_errors, unreachable
from errand.models._settings import resolve
from errand.models.errors import ModelError
from errand.models.profiles import ModelProfile, profile_for
from errand.models.protocol import Message, Reply, Tool, ToolCall, Usage

__all__ = ["OpenAIModel"]

_PROVIDER = "openai"


class OpenAIModel:
    """A chat-completions model with function calling, e.g. ``OpenAIModel("gpt-4.1")``.

    ``max_retries`` is the SDK's own retry count, off by default: errand's loop
    retries (each retry an event, its waits within the run's time budget).
    ``timeout`` (seconds) is the SDK's per-request timeout; ``stream`` asks for the
    reply as server-sent events, which keeps a long reply's connection alive
    through proxies. ``profile`` (context window, prices) defaults to errand's table.
    """

    def __init__(
        self, model: str, *, base_url: str | None = None, api_key: str | None = None,
        max_retries: int = 0, timeout: float | None = None, stream: bool = False,
        profile: ModelProfile | None = None,
    ) -> None:
        self.name = f"{_PROVIDER}:{model}"
        self.model = model
        self.stream = stream
        self.profile = profile or profile_for(model)
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
            if self.stream:
                return await self._streamed(request)
            response = await self._client.chat.completions.create(**request)
        except openai.APIStatusError as error:
            raise http_failure(self.name, _PROVIDER, error.status_code, error.message, error.response.headers,
                               error.body) from error
        except openai.APIConnectionError as error:
            raise unreachable(self.name, _PROVIDER, error) from error
        except openai.APIError as error:  # an error event in the middle of a stream
            raise unreachable(self.name, _PROVIDER, error, what="broke off its reply") from error
        except openai.OpenAIError as error:
            raise ModelError(f"{self.name} could not be reached: {error}", provider=_PROVIDER) from error
        except transport_errors() as error:
            raise unreachable(self.name, _PROVIDER, error, what="dropped the connection mid-reply") from error
        return self._reply(response)

    async def _streamed(self, request: dict[str, Any]) -> Reply:
        stream = await self._client.chat.completions.create(
            **request, stream=True, stream_options={"include_usage": True})
        reply = _Streamed()
        async for chunk in stream:
            reply.add(chunk)
        if reply.finish_reason is None:
            # Without a finish reason the reply is cut: tool-call arguments may be half-written.
            raise ModelError(f"{self.name} ended its stream before the reply was complete", provider=_PROVIDER,
                             retryable=True, code="stream_cut")
        return self._finished(reply.message(), reply.usage, reply.finish_reason)

    def _reply(self, response: ChatCompletion | str) -> Reply:
        if isinstance(response, str):
            raise not_a_reply(self.name, _PROVIDER, response)
        if not response.choices:
            raise ModelError(f"{self.name} returned no choices", provider=_PROVIDER, retryable=True)
        choice = response.choices[0]
        calls = [_tool_call(n, call.id, call.type, getattr(call, "function", None))
                 for n, call in enumerate(choice.message.tool_calls or [])]
        return self._finished(Message("assistant", choice.message.content or "", calls), _usage(response.usage),
                              choice.finish_reason or "")

    def _finished(self, message: Message, usage: Usage, stop: str) -> Reply:
        return Reply(message, usage, cost=self.profile.cost(usage), raw_stop=stop)


@dataclass
class _Streamed:
    """A reply put together from stream chunks: text, tool calls by index, usage, finish reason."""

    text: list[str] = field(default_factory=list)
    calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    usage: Usage = field(default_factory=Usage)
    finish_reason: str | None = None

    def add(self, chunk: ChatCompletionChunk) -> None:
        if chunk.usage is not None:
            self.usage = _usage(chunk.usage)
        for choice in chunk.choices[:1]:
            if choice.delta.content:
                self.text.append(choice.delta.content)
            for delta in choice.delta.tool_calls or []:
                call = self.calls.setdefault(delta.index, {"id": None, "name": "", "arguments": []})
                call["id"] = delta.id or call["id"]
                if delta.function is not None:
                    call["name"] += delta.function.name or ""
                    call["arguments"].append(delta.function.arguments or "")
            if choice.finish_reason:
                self.finish_reason = choice.finish_reason

    def message(self) -> Message:
        calls = [_tool_call(n, call["id"], "function", _Function(call["name"], "".join(call["arguments"])))
                 for n, (_, call) in enumerate(sorted(self.calls.items()))]
        return Message("assistant", "".join(self.text), calls)


@dataclass(frozen=True)
class _Function:
    name: str
    arguments: str


def _usage(usage: Any) -> Usage:
    if usage is None:
        return Usage()
    details = getattr(usage, "prompt_tokens_details", None)
    cached = (getattr(details, "cached_tokens", None) or 0) if details is not None else 0
    return Usage(usage.prompt_tokens or 0, usage.completion_tokens or 0, cache_read_tokens=cached)


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


def _tool_call(index: int, call_id: str | None, kind: str, function: Any) -> ToolCall:
    """The call as the model wrote it; one that cannot run says why in ``malformed``."""
    call_id = call_id or f"call_{index + 1}"  # some OpenAI-compatible servers send no id
    name = (function.name if function is not None else "") or ""
    if kind != "function" or function is None:
        return ToolCall(call_id, name, {}, malformed=f"a {kind!r} tool call; only function tools are offered")
    raw = function.arguments or "{}"
    try:
        arguments = json.loads(raw)
    except json.JSONDecodeError as error:
        return ToolCall(call_id, name, {}, malformed=f"its arguments are not valid JSON ({error.msg} at "
                                                     f"character {error.pos}): {raw[:300]!r}")
    if not isinstance(arguments, dict):
        return ToolCall(call_id, name, {}, malformed=f"its arguments are not a JSON object: {raw[:300]!r}")
    return ToolCall(call_id, name, arguments)
