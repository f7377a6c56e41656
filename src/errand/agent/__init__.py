"""errand.agent: the agent loop and its tools.

The loop runs on the host; only its tool calls run in the sandbox::

    agent = Agent(model, sandbox, workdir="/workspace", budgets=Budgets(max_steps=50),
                  on_event=save_event, instructions=agents_md)
    result = await agent.run("make the failing test pass")
    if result.status == "needs_input":
        result = await agent.resume(answer)

``result.status`` is ``finished``, ``needs_input``, ``budget_exhausted``,
``stuck`` or ``error``; ``result.messages`` is the whole trajectory.
"""

from errand.agent.budgets import Budgets, Spent
from errand.agent.exits import ExitStatus
from errand.agent.loop import Agent, AgentResult, EventHandler
from errand.agent.tools import TOOLS, ToolResult, run_tool

__all__ = ["TOOLS", "Agent", "AgentResult", "Budgets", "EventHandler", "ExitStatus", "Spent", "ToolResult",
           "run_tool"]
