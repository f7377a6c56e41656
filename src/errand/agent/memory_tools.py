"""The agent's memory tools: ``recall(query)`` and ``remember(text)``.

The agent knows nothing of how memory is kept; whoever runs it passes
:class:`MemoryHooks` (the task engine passes hooks onto errand's project memory)
and the two tools are registered into the agent's
:class:`~errand.agent.registry.ToolRegistry` only then
(:func:`register_memory_tools`), answered like every other tool. What
``remember`` stores starts as a proposal a person approves: the agent cannot
make its own rules.
"""

from __future__ import annotations

from typing import Protocol

from errand.agent.registry import Invocation, ToolArgumentError, ToolRegistry, ToolResult
from errand.models import Tool, ToolCall

__all__ = ["MEMORY_TOOLS", "MemoryHooks", "register_memory_tools", "run_memory_tool"]

MAX_REMEMBER_CHARS = 2000


class MemoryHooks(Protocol):
    async def recall(self, query: str) -> str:
        """What the project's memory holds about ``query``, rendered for the model."""
        ...

    async def remember(self, text: str) -> str:
        """Propose ``text`` as a memory; answer what happened (stored, merged, refused)."""
        ...


_STRING = {"type": "string"}
MEMORY_TOOLS: tuple[Tool, ...] = (
    Tool("recall", "Search what errand remembers about this project (conventions, commands that work, pitfalls, "
         "review feedback), with where each memory came from.",
         {"type": "object", "properties": {"query": _STRING}, "required": ["query"], "additionalProperties": False}),
    Tool("remember", "Propose a lasting fact about this project for future tasks (a command that works, a "
         "convention, a pitfall). A person reviews it before it is used. Never include secrets.",
         {"type": "object", "properties": {"text": _STRING}, "required": ["text"], "additionalProperties": False}),
)


def register_memory_tools(registry: ToolRegistry, hooks: MemoryHooks) -> None:
    """Register ``recall`` and ``remember`` (:data:`MEMORY_TOOLS`), answered by ``hooks``."""
    recall, remember = MEMORY_TOOLS

    async def answer_recall(invocation: Invocation) -> ToolResult:
        return _answered(await hooks.recall(_text(invocation, "query")))

    async def answer_remember(invocation: Invocation) -> ToolResult:
        text = _text(invocation, "text")
        if len(text) > MAX_REMEMBER_CHARS:
            raise ToolArgumentError(f"keep a memory under {MAX_REMEMBER_CHARS} characters")
        return _answered(await hooks.remember(text))

    registry.register(recall, answer_recall)
    registry.register(remember, answer_remember)


async def run_memory_tool(hooks: MemoryHooks, call: ToolCall) -> ToolResult:
    """Answer one call of a memory tool by ``hooks`` (for a caller without an agent: the MCP desk)."""
    registry = ToolRegistry()
    register_memory_tools(registry, hooks)
    return await registry.run(call)


def _text(invocation: Invocation, name: str) -> str:
    value = invocation.arguments.get(name)
    if not isinstance(value, str) or not value.strip():
        raise ToolArgumentError(f"'{name}' must be a non-empty string")
    return value


def _answered(answer: str) -> ToolResult:
    return ToolResult(answer, ok=not answer.startswith("error:"))
