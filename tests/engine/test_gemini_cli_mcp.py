"""errand's tools for Gemini CLI, over MCP: the real CLI, from the npm registry, in the task's sandbox.

The model, played on Gemini's API (as in test_gemini_cli.py), calls errand's tools
by the names Gemini CLI gives an MCP server's (``mcp_errand_<tool>``): it recalls
the project's memory, sends a token of a run that has ended from a shell command
(refused), asks the person and ends its turn; ``errand answer`` resumes its session
(``--resume latest``), where it makes the fix.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from errand.agent.mcp_server import ToolServer
from errand.tasks.store.tasks import TaskStore
from models.wire import Answer, Json, Recorded, Stream, WireServer

from .agent_clis import FAILING, FINAL
from .agent_clis import wire as wire  # the fixture: a loopback wire server the test owns
from .mcp_clis import ANSWER, QUESTION, assert_answered_fix, ended_runs_token, probe, run_answered, tool_servers
from .test_gemini_cli import MODEL, gemini_key, shell

pytestmark = [pytest.mark.slow, pytest.mark.network]
__all__ = ["gemini_key", "tool_servers"]


def responses(body: dict[str, Any]) -> list[tuple[str, str]]:
    """The tools' answers the CLI has sent back to the model so far: (the tool's name, what it said)."""
    return [(str(part["functionResponse"].get("name")), json.dumps(part["functionResponse"].get("response")))
            for content in body.get("contents", []) for part in content.get("parts", [])
            if isinstance(part, dict) and isinstance(part.get("functionResponse"), dict)]


class Model:
    """Plays each turn from what the conversation holds so far (a side call without tools gets text)."""

    def __init__(self, servers: list[ToolServer], loop: asyncio.AbstractEventLoop) -> None:
        self.servers, self.loop = servers, loop
        self.offered: list[str] = []
        self.calls = 0

    def __call__(self, request: Recorded) -> Answer:
        body = request.body or {}
        names = [str(d.get("name")) for tool in body.get("tools", []) for d in tool.get("functionDeclarations", [])]
        if names:
            self.offered = names
        done = {name for name, _ in responses(body)}
        if not names:
            part: dict[str, Any] = {"text": "ok"}
        elif "mcp_errand_recall" not in done:
            part = self.call("mcp_errand_recall", {"query": "how to run the project's checks"})
        elif "run_shell_command" not in done:
            part = shell(probe(ended_runs_token(self.servers, self.loop)))
        elif "mcp_errand_ask_person" not in done:
            part = self.call("mcp_errand_ask_person", {"question": QUESTION})
        elif ANSWER not in json.dumps(body):
            part = {"text": "I have asked; waiting for the answer."}
        elif "replace" not in done:
            part = self.call("replace", {"file_path": "/workspace/calc.py", "instruction": "add, not subtract",
                                         "old_string": "return a - b", "new_string": "return a + b"})
        elif [name for name, _ in responses(body)].count("run_shell_command") < 2:
            part = shell(FAILING)
        else:
            part = {"text": FINAL}
        return _reply(request, part)

    def call(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        self.calls += 1
        return {"functionCall": {"name": name, "args": args}}


def _reply(request: Recorded, part: dict[str, Any]) -> Answer:
    usage = {"promptTokenCount": 900, "candidatesTokenCount": 30, "totalTokenCount": 930}
    done = {"candidates": [{"content": {"role": "model", "parts": [part]}, "finishReason": "STOP", "index": 0}],
            "usageMetadata": usage, "modelVersion": "test-model"}
    return Stream([(None, done)]) if ":streamGenerateContent" in request.path else Json(done)


async def test_gemini_cli_asks_the_person_recalls_and_is_refused_another_runs_token_over_errands_mcp_server(
        gemini_key: None, wire: WireServer, tool_servers: list[ToolServer], tmp_path: Path) -> None:
    model = Model(tool_servers, asyncio.get_running_loop())
    wire.respond(model)
    with TaskStore.open(f"sqlite:///{tmp_path / 'errand.db'}") as store:
        task_id, task, ours = await run_answered(store, tmp_path, model=MODEL, agent="gemini-cli")
        calls = await assert_answered_fix(store, task_id, task, ours)
        # errand's tools were offered under Gemini CLI's names, and its log names them as Claude Code's.
        assert {"mcp_errand_ask_person", "mcp_errand_recall", "mcp_errand_propose_memory"} <= set(model.offered)
        assert ("mcp__errand__ask_person", {"question": QUESTION}) in [(c["name"], c["arguments"]) for c in calls]
        # The ended run's token, sent from the sandbox, was refused before MCP read it.
        outputs = [text for request in wire.requests for name, text in responses(request.body or {})
                   if name == "run_shell_command"]
        assert any("status 401" in text and "no live run has this token" in text for text in outputs), outputs
        # The answer went to the same session: the request that carries it holds the question's call too.
        resumed = [r for r in wire.requests if ANSWER in json.dumps(r.body)]
        assert resumed and "mcp_errand_ask_person" in json.dumps(resumed[0].body)
