"""The agent's memory tools: ``recall(query)`` and ``remember(text)``.

The agent knows nothing of how memory is kept; whoever runs it passes
:class:`MemoryHooks` (the task engine passes hooks onto errand's project memory)
and the two tools are offered to the model only then. What ``remember`` stores
starts as a proposal a person approves: the agent cannot make its own rules.
"""

from __future__ import annotations

from typing import Protocol

from errand.agent.tools import ToolResult
from errand.models import Tool, ToolCall

__all__ = ["MEMORY_TOOLS", "MemoryHooks", "run_memory_tool"]

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
NAMES = frozenset(tool.name for tool in MEMORY_TOOLS)


async def run_memory_tool(hooks: MemoryHooks, call: ToolCall) -> ToolResult:
    argument = "query" if call.name == "recall" else "text"
    value = call.arguments.get(argument)
    if not isinstance(value, str) or not value.strip():
        return ToolResult(f"error: {call.name}: '{argument}' must be a non-empty string", ok=False)
    if call.name == "remember" and len(value) > MAX_REMEMBER_CHARS:
        return ToolResult(f"error: remember: keep a memory under {MAX_REMEMBER_CHARS} characters", ok=False)
    answer = await (hooks.recall(value) if call.name == "recall" else hooks.remember(value))
    return ToolResult(answer, ok=not answer.startswith("error:"))
