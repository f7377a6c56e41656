"""errand's tools for OpenCode, over MCP: the real CLI, from the npm registry, in the task's sandbox.

The model, played on the chat completions wire (as in test_opencode.py), calls
errand's tools by the names OpenCode gives a remote MCP server's
(``errand_<tool>``): it recalls the project's memory, sends a token of a run that
has ended from a shell command (refused), asks the person and ends its turn;
``errand answer`` resumes its session (``--session``), where it makes the fix.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from errand.agent.mcp_server import ToolServer
from errand.tasks.store.tasks import TaskStore
from models.provider_wire import Provider, Turn
from models.wire import Answer, Recorded, WireServer

from .agent_clis import FAILING, FINAL
from .agent_clis import wire as wire  # the fixture: a loopback wire server the test owns
from .mcp_clis import ANSWER, QUESTION, assert_answered_fix, ended_runs_token, probe, run_answered, tool_servers
from .test_opencode import MODEL, from_the_cli, openai_key, tool_outputs

pytestmark = [pytest.mark.slow, pytest.mark.network]
__all__ = ["openai_key", "tool_servers"]


class Model:
    """The script, errand's tools called by the names the request offers them under."""

    def __init__(self, servers: list[ToolServer], loop: asyncio.AbstractEventLoop) -> None:
        self.servers, self.loop = servers, loop
        self.offered: list[str] = []
        self.provider = Provider("openai", self.play, streaming=True)

    def __call__(self, request: Recorded) -> Answer:
        names = [str(t.get("function", {}).get("name")) for t in (request.body or {}).get("tools") or []]
        if names and from_the_cli(request):
            self.offered = names
        return self.provider(request)

    def errands(self, tool: str) -> str:
        return next((name for name in self.offered if name.endswith(f"_{tool}")), f"errand_{tool}")

    def play(self, step: int) -> Turn:
        if step == 1:
            return Turn("", [("call_1", self.errands("recall"), {"query": "how to run the project's checks"})])
        if step == 2:
            token = ended_runs_token(self.servers, self.loop)
            return Turn("", [("call_2", "bash", {"command": probe(token), "description": "probe"})])
        if step == 3:
            return Turn("", [("call_3", self.errands("ask_person"), {"question": QUESTION})])
        script = [Turn("I have asked; waiting for the answer."),
                  Turn("Numbers only, then.", [("call_5", "edit", {"filePath": "/workspace/calc.py",
                                                                   "oldString": "return a - b",
                                                                   "newString": "return a + b"})]),
                  Turn("", [("call_6", "bash", {"command": FAILING, "description": "run the tests"})]),
                  Turn(FINAL)]
        return script[min(step - 4, len(script) - 1)]


async def test_opencode_asks_the_person_recalls_and_is_refused_another_runs_token_over_errands_mcp_server(
        openai_key: None, wire: WireServer, tool_servers: list[ToolServer], tmp_path: Path) -> None:
    model = Model(tool_servers, asyncio.get_running_loop())
    wire.respond(model)
    with TaskStore.open(f"sqlite:///{tmp_path / 'errand.db'}") as store:
        task_id, task, ours = await run_answered(store, tmp_path, model=MODEL, agent="opencode")
        calls = await assert_answered_fix(store, task_id, task, ours)
        # errand's tools were offered under OpenCode's names, and its log names them as Claude Code's.
        assert {"errand_ask_person", "errand_recall", "errand_propose_memory"} <= set(model.offered), model.offered
        assert ("mcp__errand__ask_person", {"question": QUESTION}) in [(c["name"], c["arguments"]) for c in calls]
        # The ended run's token, sent from the sandbox, was refused before MCP read it.
        probed = tool_outputs(wire.requests)["call_2"]
        assert "status 401" in probed and "no live run has this token" in probed, probed
        # The answer went to the same session: the request that carries it holds the question's call too.
        resumed = [r for r in wire.requests if ANSWER in json.dumps(r.body) and from_the_cli(r)]
        assert resumed and "call_3" in json.dumps(resumed[0].body["messages"])
