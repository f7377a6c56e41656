"""The one place a tool call is answered: each tool declares its schema and its handler.

The agent offers the model :attr:`ToolRegistry.schemas` and runs every call
through :meth:`ToolRegistry.run`, whichever tool it is: errand's own
(:func:`~errand.agent.tools.register_core_tools`), the memory tools
(:func:`~errand.agent.memory_tools.register_memory_tools`) or any other a
caller registers::

    registry = ToolRegistry()
    registry.register(Tool("now", "The time on the host.", {"type": "object", "properties": {}}), now)
    result = await registry.run(ToolCall("c1", "now", {}))

A handler that cannot do what was asked raises :class:`ToolArgumentError` (or
the workspace's :class:`~errand.errors.FilesError`); the call is then answered
with an ``error:`` result the model can act on. Only the run's exits
(:mod:`errand.agent.exits`) and a workspace that is gone get through.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from errand.errors import ConfigError, FilesError, SandboxNotFound, SandboxTerminated
from errand.models import Tool, ToolCall

__all__ = ["Handler", "Invocation", "OutputHandler", "ToolArgumentError", "ToolRegistry", "ToolResult", "error_result"]

#: Receives a shell command's output as it arrives (text, decoded incrementally).
OutputHandler = Callable[[str], Awaitable[None]]


@dataclass(frozen=True)
class ToolResult:
    """What a tool call answered; ``ok`` is false for an ``error:`` result.

    ``exit_code`` is the shell command's (``None`` for other tools, or a command
    killed by its timeout).
    """

    content: str
    ok: bool = True
    exit_code: int | None = None


class ToolArgumentError(Exception):
    """The model called a tool with arguments it cannot act on; the message says what was wrong."""


@dataclass(frozen=True)
class Invocation:
    """One tool call as its handler receives it; ``on_output`` sees a long command's output as it comes."""

    call: ToolCall
    on_output: OutputHandler | None = None

    @property
    def arguments(self) -> dict[str, Any]:
        return self.call.arguments


#: Answers one call of its tool.
Handler = Callable[[Invocation], Awaitable[ToolResult]]


class ToolRegistry:
    """The tools an agent offers, in the order they were registered, each with its handler."""

    def __init__(self) -> None:
        self._tools: dict[str, tuple[Tool, Handler]] = {}

    def register(self, schema: Tool, handler: Handler) -> None:
        """Offer ``schema`` to the model; its calls go to ``handler``. A name is registered once."""
        if schema.name in self._tools:
            raise ConfigError(f"a tool named {schema.name!r} is already registered", code="duplicate_tool")
        self._tools[schema.name] = (schema, handler)

    @property
    def schemas(self) -> tuple[Tool, ...]:
        return tuple(schema for schema, _ in self._tools.values())

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    async def run(self, call: ToolCall, *, on_output: OutputHandler | None = None) -> ToolResult:
        """Answer ``call``. Raises only the run's exits, and errors of a workspace that is gone."""
        entry = self._tools.get(call.name)
        if entry is None:
            return error_result(f"unknown tool {call.name!r}; the tools are {', '.join(self._tools)}")
        try:
            return await entry[1](Invocation(call, on_output))
        except ToolArgumentError as error:
            return error_result(f"{call.name}: {error}")
        except (SandboxTerminated, SandboxNotFound):
            raise
        except FilesError as error:
            return error_result(f"{error.path}: {error.message}")
        except ConfigError as error:
            return error_result(error.message)


def error_result(message: str) -> ToolResult:
    """An ``error:`` answer the model reads and can act on."""
    return ToolResult(f"error: {message}", ok=False)
