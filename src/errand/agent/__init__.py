"""errand.agent: the agent loop and its tools.

The loop runs on the host; only its tool calls run in the workspace (a task's sandbox)::

    config = AgentConfig(workdir="/workspace", budgets=Budgets(max_steps=50), instructions=agents_md)
    agent = Agent(model, sandbox, config, AgentHooks(on_event=save_event))
    result = await agent.run("make the failing test pass")
    if result.status == "needs_input":
        result = await agent.resume(answer)

``result.status`` is ``finished``, ``needs_input``, ``budget_exhausted``,
``stuck`` or ``error``; ``result.messages`` is the whole trajectory, and
``result.to_json()`` its plain form. The sandbox is one :class:`Workspace`:
anything with its ``exec``, ``run`` and ``files`` serves the same tools. Every
tool the model is offered sits in one :class:`ToolRegistry`.

The names here are imported when first asked for (errand._lazy): ``errand.agent.seam``
does not load the loop.
"""

from typing import TYPE_CHECKING

from errand._lazy import face

if TYPE_CHECKING:
    from errand.agent.budgets import Budgets, Spent
    from errand.agent.config import AgentConfig, AgentHooks
    from errand.agent.exits import ExitStatus
    from errand.agent.loop import Agent, EventHandler
    from errand.agent.registry import ToolRegistry, ToolResult
    from errand.agent.result import AgentResult
    from errand.agent.tools import TOOLS, run_tool
    from errand.agent.workspace import Workspace

_HOMES = {
    "Budgets": "budgets", "Spent": "budgets", "AgentConfig": "config", "AgentHooks": "config", "ExitStatus": "exits",
    "Agent": "loop", "EventHandler": "loop", "ToolRegistry": "registry", "ToolResult": "registry",
    "AgentResult": "result", "TOOLS": "tools", "run_tool": "tools", "Workspace": "workspace",
}

__all__ = ["TOOLS", "Agent", "AgentConfig", "AgentHooks", "AgentResult", "Budgets", "EventHandler", "ExitStatus",
           "Spent", "ToolRegistry", "ToolResult", "Workspace", "run_tool"]

if not TYPE_CHECKING:  # a type checker sees the names above, and no catch-all
    __getattr__ = face(__name__, _HOMES)
