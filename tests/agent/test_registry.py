"""One registry answers every tool call: errand's own tools, the memory tools, a caller's own."""

from __future__ import annotations

from pathlib import Path

import pytest

from errand.agent import TOOLS, Agent, AgentConfig, AgentHooks, ToolRegistry, ToolResult
from errand.agent.exits import NeedsInput
from errand.agent.memory_tools import MEMORY_TOOLS, register_memory_tools, run_memory_tool
from errand.agent.registry import Invocation, ToolArgumentError
from errand.agent.tools import register_core_tools
from errand.errors import ConfigError, FilesError, SandboxTerminated
from errand.models import ScriptedModel, Tool, ToolCall

from .host_workspace import HostDirectory

NOW = Tool("now", "The time on the host.", {"type": "object", "properties": {"zone": {"type": "string"}}})


class Notebook:
    def __init__(self) -> None:
        self.proposed: list[str] = []

    async def recall(self, query: str) -> str:
        return f"nothing about {query}"

    async def remember(self, text: str) -> str:
        self.proposed.append(text)
        return "error: not remembered: the store is read-only" if text == "refused" else "proposed as m-1"


async def test_a_tool_declares_its_schema_and_handler_and_is_answered() -> None:
    async def now(invocation: Invocation) -> ToolResult:
        zone = invocation.arguments.get("zone")
        if zone not in (None, "UTC"):
            raise ToolArgumentError(f"unknown zone {zone!r}")
        return ToolResult(f"12:00 UTC ({invocation.call.id})")

    registry = ToolRegistry()
    registry.register(NOW, now)
    assert registry.schemas == (NOW,) and "now" in registry
    assert await registry.run(ToolCall("c1", "now", {})) == ToolResult("12:00 UTC (c1)")
    assert await registry.run(ToolCall("c2", "now", {"zone": "Mars"})) == ToolResult(
        "error: now: unknown zone 'Mars'", ok=False)
    assert await registry.run(ToolCall("c3", "later", {})) == ToolResult(
        "error: unknown tool 'later'; the tools are now", ok=False)


async def test_a_name_is_registered_once_and_a_refusal_changes_nothing() -> None:
    registry = ToolRegistry()
    register_core_tools(registry, HostDirectory(Path("/")), "/")
    with pytest.raises(ConfigError) as refused:
        registry.register(Tool("shell", "another shell", {"type": "object"}), _never)
    assert refused.value.code == "duplicate_tool"
    assert registry.schemas == TOOLS
    register_memory_tools(registry, Notebook())
    with pytest.raises(ConfigError):
        register_memory_tools(registry, Notebook())
    assert [tool.name for tool in registry.schemas] == [*(t.name for t in TOOLS), "recall", "remember"]


async def test_what_a_handler_raises_becomes_an_answer_but_the_run_s_exits_get_through() -> None:
    async def missing(invocation: Invocation) -> ToolResult:
        raise FilesError("no such file", path="/w/gone.py")

    async def gone(invocation: Invocation) -> ToolResult:
        raise SandboxTerminated("the sandbox ended", terminated_by="alice")

    async def pause(invocation: Invocation) -> ToolResult:
        raise NeedsInput("which one?", invocation.call.id)

    registry = ToolRegistry()
    for name, handler in (("missing", missing), ("gone", gone), ("pause", pause)):
        registry.register(Tool(name, name, {"type": "object"}), handler)
    assert (await registry.run(ToolCall("c1", "missing", {}))).content == "error: /w/gone.py: no such file"
    with pytest.raises(SandboxTerminated):
        await registry.run(ToolCall("c2", "gone", {}))
    with pytest.raises(NeedsInput):
        await registry.run(ToolCall("c3", "pause", {}))


async def test_the_memory_tools_are_answered_by_the_agent_s_one_registry(tmp_path: Path) -> None:
    notebook = Notebook()
    plain = Agent(ScriptedModel(), HostDirectory(tmp_path), AgentConfig(workdir=str(tmp_path)))
    agent = Agent(ScriptedModel(), HostDirectory(tmp_path), AgentConfig(workdir=str(tmp_path)),
                  AgentHooks(memory=notebook))
    assert plain.tools == list(TOOLS) and "recall" not in plain.registry
    assert agent.tools == [*TOOLS, *MEMORY_TOOLS] == list(agent.registry.schemas)
    answer = await agent.registry.run(ToolCall("c1", "remember", {"text": "x" * 2001}))
    assert answer == ToolResult("error: remember: keep a memory under 2000 characters", ok=False)
    assert await agent.registry.run(ToolCall("c2", "remember", {"text": "refused"})) == ToolResult(
        "error: not remembered: the store is read-only", ok=False)
    assert await agent.registry.run(ToolCall("c3", "recall", {"query": " "})) == ToolResult(
        "error: recall: 'query' must be a non-empty string", ok=False)
    assert notebook.proposed == ["refused"]
    # The MCP desk, which has no agent, answers through a registry of the memory tools alone.
    assert await run_memory_tool(notebook, ToolCall("c4", "recall", {"query": "tests"})) == ToolResult(
        "nothing about tests")


async def _never(invocation: Invocation) -> ToolResult:
    raise AssertionError("a refused registration must not be called")
