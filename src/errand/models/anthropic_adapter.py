"""Claude models behind the Anthropic Messages API, through the official ``anthropic`` SDK.

Settings come from the arguments, then ``ERRAND_ANTHROPIC_BASE_URL`` /
``ERRAND_ANTHROPIC_API_KEY``, then the SDK's own ``ANTHROPIC_BASE_URL`` /
``ANTHROPIC_API_KEY``.

The Messages API differs from our protocol in three ways this module absorbs:
the system prompt is a parameter, not a message; tool results are
``tool_result`` blocks inside a *user* turn; and turns alternate, so adjacent
messages of one role (several tool results, then a person's note) merge into
one turn.

Prompt caching: the stable prefix is marked with ``cache_control`` — the system
prompt (which, in the API's order, also covers the tools) and each message the
caller marked ``cache`` (the loop marks the end of the part of its history it
will send again unchanged); at most four marks, the API's limit.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import anthropic
from anthropic.types import RawMessageStreamEvent

from errand.models._failures import http_failure, not_a_reply, transport_errors, unreachable
from errand.models._settings import resolve
from errand.models.errors import ModelError
from errand.models.profiles import ModelProfile, profile_for
from errand.models.protocol import Message, Reply, Tool, ToolCall, Usage

__all__ = ["AnthropicModel"]

_PROVIDER = "anthropic"
_EPHEMERAL = {"type": "ephemeral"}
MAX_CACHE_MARKS = 4


class AnthropicModel:
    """A Claude model with tool use, e.g. ``AnthropicModel("claude-sonnet-4-5")``.

    ``max_tokens`` caps each reply (the API requires it); ``max_retries`` is the
    SDK's own retry count, off by default since errand's loop retries; ``timeout``
    (seconds) is the SDK's. ``stream`` asks for server-sent events; ``cache``
    marks the stable prefix for prompt caching; ``profile`` (window, prices)
    defaults to errand's table.
    """

    def __init__(
        self, model: str, *, base_url: str | None = None, api_key: str | None = None,
        max_tokens: int = 8192, max_retries: int = 0, timeout: float | None = None, stream: bool = False,
        cache: bool = True, profile: ModelProfile | None = None,
    ) -> None:
        self.name = f"{_PROVIDER}:{model}"
        self.model = model
        self.max_tokens = max_tokens
        self.stream = stream
        self.cache = cache
        self.profile = profile or profile_for(model)
        options: dict[str, Any] = {"max_retries": max_retries}
        if timeout is not None:
            options["timeout"] = timeout
        try:
            self._client = anthropic.AsyncAnthropic(
                base_url=resolve(base_url, "ERRAND_ANTHROPIC_BASE_URL"),
                api_key=resolve(api_key, "ERRAND_ANTHROPIC_API_KEY"),
                **options,
            )
        except anthropic.AnthropicError as error:
            raise ModelError(f"cannot set up the Anthropic client: {error}", provider=_PROVIDER) from error

    async def aclose(self) -> None:
        """Close the SDK client's connection pool."""
        await self._client.close()

    async def complete(self, messages: Sequence[Message], tools: Sequence[Tool]) -> Reply:
        request = self._request(messages, tools)
        try:
            if self.stream:
                return await self._streamed(request)
            response = await self._client.messages.create(**request)
        except anthropic.APIStatusError as error:
            if error.status_code < 300:  # an error event in the middle of a stream (overloaded, say)
                raise unreachable(self.name, _PROVIDER, error, what="broke off its reply") from error
            raise http_failure(self.name, _PROVIDER, error.status_code, error.message, error.response.headers,
                               error.body) from error
        except anthropic.APIConnectionError as error:
            raise unreachable(self.name, _PROVIDER, error) from error
        except anthropic.AnthropicError as error:
            raise ModelError(f"{self.name} could not be reached: {error}", provider=_PROVIDER) from error
        except transport_errors() as error:
            raise unreachable(self.name, _PROVIDER, error, what="dropped the connection mid-reply") from error
        except TypeError as error:
            # The SDK signals "no credentials" with a TypeError at request time, not at construction.
            if self._client.api_key is not None or self._client.auth_token is not None:
                raise
            raise ModelError(
                f"{self.name} has no API key: set ERRAND_ANTHROPIC_API_KEY or ANTHROPIC_API_KEY",
                provider=_PROVIDER,
            ) from error
        if isinstance(response, str):
            raise not_a_reply(self.name, _PROVIDER, response)
        return self._finished(_message(response.content), _usage(response.usage), response.stop_reason or "")

    def _request(self, messages: Sequence[Message], tools: Sequence[Tool]) -> dict[str, Any]:
        system = [m for m in messages if m.role == "system" and m.content]
        turns = _wire_turns(m for m in messages if m.role != "system")
        request: dict[str, Any] = {"model": self.model, "max_tokens": self.max_tokens, "messages": turns}
        if system:
            text = "\n\n".join(m.content for m in system)
            request["system"] = [{"type": "text", "text": text, "cache_control": _EPHEMERAL}] if self.cache else text
        if tools:
            request["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.parameters} for t in tools
            ]
            if self.cache and not system:
                request["tools"][-1]["cache_control"] = _EPHEMERAL
        _mark_turns(turns, MAX_CACHE_MARKS - 1 if self.cache else 0)
        return request

    async def _streamed(self, request: dict[str, Any]) -> Reply:
        stream = await self._client.messages.create(**request, stream=True)
        reply = _Streamed()
        async for event in stream:
            reply.add(event)
        if not reply.stopped:
            # Without message_stop the reply is cut: a tool call's input may be half-written.
            raise ModelError(f"{self.name} ended its stream before the reply was complete", provider=_PROVIDER,
                             retryable=True, code="stream_cut")
        return self._finished(reply.message(), reply.usage(), reply.stop_reason)

    def _finished(self, message: Message, usage: Usage, stop: str) -> Reply:
        return Reply(message, usage, cost=self.profile.cost(usage), raw_stop=stop)


def _wire_turns(messages: Iterable[Message]) -> list[dict[str, Any]]:
    turns: list[dict[str, Any]] = []
    for message in messages:
        role = "assistant" if message.role == "assistant" else "user"
        blocks = _wire_blocks(message)
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
        if message.cache and turns[-1]["content"]:
            turns[-1]["content"][-1]["_cache"] = True
    return turns


def _mark_turns(turns: list[dict[str, Any]], limit: int) -> None:
    """Turn the caller's ``cache`` marks into ``cache_control``, keeping the last ``limit`` (none: 0)."""
    marked = [block for turn in turns for block in turn["content"] if block.pop("_cache", False)]
    for block in marked[-limit:] if limit > 0 else []:
        block["cache_control"] = _EPHEMERAL


def _wire_blocks(message: Message) -> list[dict[str, Any]]:
    if message.role == "tool":
        return [{"type": "tool_result", "tool_use_id": message.tool_call_id, "content": message.content}]
    # The API rejects empty text blocks, which an assistant turn of only tool calls would otherwise carry.
    blocks: list[dict[str, Any]] = [{"type": "text", "text": message.content}] if message.content else []
    blocks += [{"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments} for c in message.tool_calls]
    return blocks


def _message(content: Iterable[Any]) -> Message:
    blocks = list(content)
    text = "".join(block.text for block in blocks if block.type == "text")
    calls = [_tool_call(block.id, block.name, block.input) for block in blocks if block.type == "tool_use"]
    return Message("assistant", text, calls)


def _tool_call(call_id: str, name: str, arguments: Any) -> ToolCall:
    if not isinstance(arguments, dict):
        return ToolCall(call_id, name, {}, malformed=f"its input is not a JSON object: {str(arguments)[:300]!r}")
    return ToolCall(call_id, name, dict(arguments))


def _usage(usage: Any) -> Usage:
    read = getattr(usage, "cache_read_input_tokens", None) or 0
    write = getattr(usage, "cache_creation_input_tokens", None) or 0
    # input_tokens leaves out cached prompt tokens; they were still read, so the total includes them.
    return Usage((usage.input_tokens or 0) + read + write, usage.output_tokens or 0,
                 cache_read_tokens=read, cache_write_tokens=write)


@dataclass
class _Streamed:
    """A reply put together from stream events; ``stopped`` once ``message_stop`` came."""

    blocks: dict[int, dict[str, Any]] = field(default_factory=dict)
    start_usage: Any = None
    output_tokens: int = 0
    stop_reason: str = ""
    stopped: bool = False

    def add(self, event: RawMessageStreamEvent) -> None:
        if event.type == "message_start":
            self.start_usage = event.message.usage
        elif event.type == "content_block_start":
            block = event.content_block
            self.blocks[event.index] = ({"type": "tool_use", "id": block.id, "name": block.name, "json": []}
                                        if block.type == "tool_use" else {"type": block.type, "text": []})
        elif event.type == "content_block_delta":
            self._delta(event.index, event.delta)
        elif event.type == "message_delta":
            self.stop_reason = event.delta.stop_reason or self.stop_reason
            self.output_tokens = event.usage.output_tokens
        elif event.type == "message_stop":
            self.stopped = True

    def _delta(self, index: int, delta: Any) -> None:
        block = self.blocks.get(index)
        if block is None:
            return
        if delta.type == "text_delta":
            block["text"].append(delta.text)
        elif delta.type == "input_json_delta":
            block["json"].append(delta.partial_json)

    def message(self) -> Message:
        text, calls = [], []
        for _, block in sorted(self.blocks.items()):
            if block["type"] == "text":
                text.append("".join(block["text"]))
            elif block["type"] == "tool_use":
                calls.append(_streamed_call(block))
        return Message("assistant", "".join(text), calls)

    def usage(self) -> Usage:
        start = self.start_usage
        if start is None:
            return Usage(output_tokens=self.output_tokens)
        read = start.cache_read_input_tokens or 0
        write = start.cache_creation_input_tokens or 0
        return Usage((start.input_tokens or 0) + read + write, self.output_tokens,
                     cache_read_tokens=read, cache_write_tokens=write)


def _streamed_call(block: dict[str, Any]) -> ToolCall:
    raw = "".join(block["json"]) or "{}"
    try:
        arguments = json.loads(raw)
    except json.JSONDecodeError as error:
        return ToolCall(block["id"], block["name"], {}, malformed=f"its input is not valid JSON ({error.msg}): "
                                                                  f"{raw[:300]!r}")
    return _tool_call(block["id"], block["name"], arguments)
