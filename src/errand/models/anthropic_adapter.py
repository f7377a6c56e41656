"""Claude models behind the Anthropic Messages API, through the official ``anthropic`` SDK.

Settings come from the arguments, then ``ERRAND_ANTHROPIC_BASE_URL`` /
``ERRAND_ANTHROPIC_API_KEY``, then the SDK's own ``ANTHROPIC_BASE_URL`` /
``ANTHROPIC_API_KEY``.

The Messages API differs from our protocol in three ways this module absorbs:
the system prompt is a parameter, not a message; tool results are
``tool_result`` blocks inside a *user* turn; and turns alternate, so adjacent
messages of one role (several tool results, then a person's note) merge into
one turn.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import anthropic
from anthropic.types import Message as AnthropicMessage

from errand.models._settings import resolve
from errand.models.errors import ModelError
from errand.models.protocol import Message, Reply, Tool, ToolCall, Usage

__all__ = ["AnthropicModel"]

_PROVIDER = "anthropic"


class AnthropicModel:
    """A Claude model with tool use, e.g. ``AnthropicModel("claude-sonnet-4-5")``.

    ``max_tokens`` caps each reply (the API requires it); ``max_retries`` and
    ``timeout`` (seconds) are the SDK's.
    """

    def __init__(
        self, model: str, *, base_url: str | None = None, api_key: str | None = None,
        max_tokens: int = 8192, max_retries: int = 2, timeout: float | None = None,
    ) -> None:
        self.name = f"{_PROVIDER}:{model}"
        self.model = model
        self.max_tokens = max_tokens
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
        system = "\n\n".join(m.content for m in messages if m.role == "system" and m.content)
        request: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "messages": _wire_turns(m for m in messages if m.role != "system"),
        }
        if system:
            request["system"] = system
        if tools:
            request["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.parameters} for t in tools
            ]
        try:
            response = await self._client.messages.create(**request)
        except anthropic.APIStatusError as error:
            raise ModelError(
                f"{self.name} answered HTTP {error.status_code}: {error.message}",
                provider=_PROVIDER, status=error.status_code,
            ) from error
        except anthropic.AnthropicError as error:
            raise ModelError(f"{self.name} could not be reached: {error}", provider=_PROVIDER) from error
        except TypeError as error:
            # The SDK signals "no credentials" with a TypeError at request time, not at construction.
            if self._client.api_key is not None or self._client.auth_token is not None:
                raise
            raise ModelError(
                f"{self.name} has no API key: set ERRAND_ANTHROPIC_API_KEY or ANTHROPIC_API_KEY",
                provider=_PROVIDER,
            ) from error
        return _reply(response)


def _wire_turns(messages: Iterable[Message]) -> list[dict[str, Any]]:
    turns: list[dict[str, Any]] = []
    for message in messages:
        role = "assistant" if message.role == "assistant" else "user"
        blocks = _wire_blocks(message)
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    return turns


def _wire_blocks(message: Message) -> list[dict[str, Any]]:
    if message.role == "tool":
        return [{"type": "tool_result", "tool_use_id": message.tool_call_id, "content": message.content}]
    # The API rejects empty text blocks, which an assistant turn of only tool calls would otherwise carry.
    blocks: list[dict[str, Any]] = [{"type": "text", "text": message.content}] if message.content else []
    blocks += [{"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments} for c in message.tool_calls]
    return blocks


def _reply(response: AnthropicMessage) -> Reply:
    text = "".join(block.text for block in response.content if block.type == "text")
    calls = [
        ToolCall(block.id, block.name, dict(block.input))
        for block in response.content
        if block.type == "tool_use"
    ]
    usage = response.usage
    # input_tokens leaves out cached prompt tokens; they were still read.
    input_tokens = usage.input_tokens + (usage.cache_creation_input_tokens or 0) + (usage.cache_read_input_tokens or 0)
    return Reply(
        Message("assistant", text, calls),
        Usage(input_tokens, usage.output_tokens),
        cost=None,
        raw_stop=response.stop_reason or "",
    )
