"""The one small protocol every model speaks, and the plain values it passes.

A conversation is a list of :class:`Message`; a model answers it with a
:class:`Reply` whose message is the assistant's turn (text and/or
:class:`ToolCall`). Tool results go back as ``role="tool"`` messages naming the
call they answer. Adapters translate these values to and from each provider's
wire format; nothing above this layer sees a provider's types.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, get_args

from errand.errors import ConfigError

__all__ = ["Message", "Model", "Reply", "Role", "Tool", "ToolCall", "Usage"]

Role = Literal["system", "user", "assistant", "tool"]
_ROLES = frozenset(get_args(Role))


@dataclass(frozen=True)
class ToolCall:
    """The model asks for tool ``name`` to run with ``arguments``; ``id`` pairs it with its result.

    ``malformed`` says why the call cannot run as the model wrote it (its
    arguments were not a JSON object, say); its ``arguments`` are then ``{}``
    and the caller answers it with that reason rather than running anything.
    """

    id: str
    name: str
    arguments: dict[str, Any]
    malformed: str | None = None


@dataclass(frozen=True)
class Message:
    """One turn of a conversation.

    ``tool_calls`` only on assistant messages; ``tool_call_id`` only (and
    always) on tool messages, naming the call whose result ``content`` is.
    ``cache`` marks the end of a prefix the caller will send again unchanged:
    a provider with prompt caching (Anthropic) may cache the conversation up
    to here; the others ignore it.
    """

    role: Role
    content: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_call_id: str | None = None
    cache: bool = field(default=False, compare=False)

    def __post_init__(self) -> None:
        if self.role not in _ROLES:
            raise ConfigError(f"unknown message role {self.role!r}; use one of {', '.join(sorted(_ROLES))}")
        if self.tool_calls and self.role != "assistant":
            raise ConfigError(f"a {self.role} message cannot carry tool calls; only assistant messages do")
        if (self.role == "tool") != (self.tool_call_id is not None):
            raise ConfigError("a tool message needs the tool_call_id it answers, and only tool messages have one")


@dataclass(frozen=True)
class Tool:
    """A tool offered to the model; ``parameters`` is a JSON Schema object for its arguments."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True)
class Usage:
    """The tokens one call took. ``input_tokens`` counts the whole prompt, cached parts
    included; of those, ``cache_read_tokens`` were read from the provider's prompt cache
    and ``cache_write_tokens`` written to it (each priced differently)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    @property
    def uncached_input_tokens(self) -> int:
        return max(self.input_tokens - self.cache_read_tokens - self.cache_write_tokens, 0)

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.input_tokens + other.input_tokens, self.output_tokens + other.output_tokens,
                     self.cache_read_tokens + other.cache_read_tokens,
                     self.cache_write_tokens + other.cache_write_tokens)


@dataclass(frozen=True)
class Reply:
    """A model's answer: the assistant message, the tokens it took, and why it stopped.

    ``cost`` is in US dollars when known; ``raw_stop`` is the provider's own
    stop reason (``"stop"``, ``"tool_calls"``, ``"end_turn"``, ``"tool_use"``...).
    """

    message: Message
    usage: Usage
    cost: float | None
    raw_stop: str


class Model(Protocol):
    """A language model that can call tools. Implementations raise :class:`~errand.models.ModelError`."""

    name: str

    async def complete(self, messages: Sequence[Message], tools: Sequence[Tool]) -> Reply: ...
