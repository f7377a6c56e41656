"""errand's tools for mini-swe-agent, which has no MCP client: a command errand puts in its sandbox.

mini-swe-agent's one tool is ``bash`` and no module of its package speaks MCP,
so errand gives it a short client of the same MCP server (``errand_tools.py``)
and names it in its instructions. The model, played on the chat completions wire
(as in test_mini_swe_agent.py), recalls the project's memory with it, sends a
token of a run that has ended (refused), asks the person and submits; mini-swe-agent
cannot resume a session, so ``errand answer`` starts a new run told the task, the
earlier run's transcript and the answer, which makes the fix.
"""

from __future__ import annotations

import asyncio
import json
import shlex
from pathlib import Path

import pytest

from errand.agent.mcp_server import ToolServer
from errand.agent.mini_swe_agent import SUBMIT, TOOLS
from errand.tasks.store.tasks import TaskStore
from models.provider_wire import Provider, Turn
from models.wire import WireServer

from .agent_clis import FAILING, FINAL, CliModel
from .agent_clis import wire as wire  # the fixture: a loopback wire server the test owns
from .mcp_clis import ANSWER, QUESTION, assert_answered_fix, ended_runs_token, probe, run_answered, tool_servers
from .test_mini_swe_agent import FIX, MODEL, from_the_cli, openai_key

pytestmark = [pytest.mark.slow, pytest.mark.network]
__all__ = ["openai_key", "tool_servers"]

RECALL = f"python3 {TOOLS} recall {shlex.quote('how to run the project' + chr(39) + 's checks')}"
ASK = f"python3 {TOOLS} ask_person {shlex.quote(QUESTION)}"


def bash(call_id: str, command: str, text: str = "") -> Turn:
    return Turn(text, [(call_id, "bash", {"command": command})])


async def test_mini_swe_agent_asks_the_person_and_recalls_through_errands_command_and_an_ended_runs_token_is_refused(
        openai_key: None, wire: WireServer, tool_servers: list[ToolServer], tmp_path: Path) -> None:
    loop = asyncio.get_running_loop()

    def play(step: int) -> Turn:
        if step == 2:
            return bash("call_2", probe(ended_runs_token(tool_servers, loop)))
        script = [bash("call_1", RECALL), None, bash("call_3", ASK),
                  bash("call_4", f"echo {SUBMIT}", "I have asked; waiting for the answer."),
                  bash("call_5", FIX), bash("call_6", FAILING), bash("call_7", f"echo {SUBMIT}", FINAL)]
        turn = script[min(step, len(script)) - 1]
        assert turn is not None
        return turn

    model = CliModel(Provider("openai", play), from_the_cli)
    wire.respond(model)
    with TaskStore.open(f"sqlite:///{tmp_path / 'errand.db'}") as store:
        task_id, task, ours = await run_answered(store, tmp_path, model=MODEL, agent="mini-swe-agent")
        calls = await assert_answered_fix(store, task_id, task, ours)
        commands = [c["arguments"].get("command") for c in calls]
        assert commands[0] == RECALL and ASK in commands and FIX in commands
        events = store.events(task_id, 0, 100_000)
        results = {e.data["id"]: e.data for e in events if e.kind == "tool_result"}
        # The ended run's token, sent from the sandbox, was refused before MCP read it.
        assert "status 401" in results["call_2"]["content"], results["call_2"]
        assert "no live run has this token" in results["call_2"]["content"]
        assert results["call_3"]["exit_code"] == 0 and "with the person" in results["call_3"]["content"]
        # It was told the command, not an MCP server; the new run was told the question and the answer.
        cli = [r for r in wire.requests if from_the_cli(r)]
        assert TOOLS in json.dumps(cli[0].body["messages"]) and "MCP server" not in json.dumps(cli[0].body)
        retold = [r for r in cli if ANSWER in json.dumps(r.body)]
        assert retold and QUESTION in json.dumps(retold[0].body["messages"])
