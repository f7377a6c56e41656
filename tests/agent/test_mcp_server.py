"""errand's MCP server for agent CLIs, on the model gateway's listener, spoken to as a CLI does:
JSON-RPC over streamable HTTP, each run with its own token (the real CLIs are driven in
tests/engine/test_claude_code_mcp.py and test_codex_mcp.py)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from errand.agent.external import CliAgent, ToolAccess
from errand.agent.mcp_server import PATH, Desk, ToolServer
from errand.gateway import Gateway, GatewayError, Upstream
from errand.sandbox import AsyncSandbox

from .test_external import ACCESS, StandIn, assistant, bash, done, init, result_of

VERSION = "2025-06-18"


@dataclass
class Memory:
    """One project's memory, as the engine's hooks give it (errand.tasks.round.memory_link)."""

    project: str
    proposed: list[str] = field(default_factory=list)

    async def recall(self, query: str) -> str:
        return f"[memory 1] (command) {self.project}'s tests: make test — source: a person"

    async def remember(self, text: str) -> str:
        self.proposed.append(text)
        return f"proposed as memory {len(self.proposed)}; a person approves it before later tasks are given it"


@dataclass
class Served:
    gateway: Gateway
    tools: ToolServer

    async def call(self, token: str, method: str, params: dict[str, Any] | None = None) -> httpx.Response:
        async with httpx.AsyncClient(trust_env=False) as client:
            return await client.post(self.gateway.origin + PATH, json={
                "jsonrpc": "2.0", "id": 1, "method": method, **({"params": params} if params else {})},
                headers={"authorization": f"Bearer {token}", "accept": "application/json, text/event-stream",
                         "mcp-protocol-version": VERSION})

    async def tool(self, token: str, name: str, **arguments: Any) -> tuple[str, bool]:
        reply = await self.call(token, "tools/call", {"name": name, "arguments": arguments})
        assert reply.status_code == 200, reply.text
        result = reply.json()["result"]
        return result["content"][0]["text"], not result["isError"]


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    tools = ToolServer()
    async with Gateway(tmp_path / "transcripts") as gateway:
        gateway.mount(PATH, tools)
        yield Served(gateway, tools)
        await tools.stop()


async def test_each_run_reaches_its_own_tools_only_and_a_closed_runs_token_is_refused(served: Served) -> None:
    ours, theirs = Memory("ours"), Memory("theirs")
    token = await served.tools.open("run-1", Desk(ours))
    other = await served.tools.open("run-2", Desk(theirs))
    listed = (await served.call(token, "tools/list")).json()["result"]["tools"]
    assert [tool["name"] for tool in listed] == ["ask_person", "recall", "propose_memory"]
    assert await served.tool(token, "recall", query="tests") == (
        "[memory 1] (command) ours's tests: make test — source: a person", True)
    assert (await served.tool(other, "recall", query="tests"))[0].startswith("[memory 1] (command) theirs's")
    text, ok = await served.tool(token, "propose_memory", text="make test runs the suite")
    assert ok and text.startswith("proposed as memory 1") and ours.proposed == ["make test runs the suite"]
    assert theirs.proposed == []
    await served.tools.close("run-1")
    refused = await served.call(token, "tools/list")  # run 1 is over; run 2 is still live
    assert refused.status_code == 401 and "no live run has this token" in refused.text
    assert (await served.call(other, "tools/list")).status_code == 200
    assert (await served.call("errand-mcp-" + "x" * 43, "tools/list")).status_code == 401
    async with httpx.AsyncClient(trust_env=False) as client:  # no token at all
        assert (await client.post(served.gateway.origin + PATH, json={"jsonrpc": "2.0", "id": 1,
                                                                       "method": "tools/list"})).status_code == 401


async def test_the_model_token_opens_no_tools_and_the_tools_token_calls_no_model(served: Served) -> None:
    grant = await served.gateway.grant("run-1", Upstream("anthropic", "http://127.0.0.1:9", "sk-ant-key"))
    token = await served.tools.open("run-1", Desk(Memory("ours")))
    assert (await served.call(grant.token, "tools/list")).status_code == 401
    async with httpx.AsyncClient(trust_env=False) as client:
        reply = await client.post(served.gateway.origin + "/v1/messages", json={"model": "m", "messages": []},
                                  headers={"x-api-key": token, "anthropic-version": "2023-06-01"})
    assert reply.status_code == 401 and reply.json()["error"]["type"] == "authentication_error"
    for path in ("/v1/messages", "/mcp/", "mcp"):  # nothing is mounted over a provider's routes
        with pytest.raises(GatewayError, match="cannot mount"):
            served.gateway.mount(path, served.tools)


async def test_ask_person_leaves_the_question_on_the_runs_desk_and_bad_calls_are_tool_errors(
        served: Served) -> None:
    desk = Desk()  # a worker that keeps no project memory
    token = await served.tools.open("run-1", desk)
    text, ok = await served.tool(token, "ask_person", question="  Numbers only?  ")
    assert ok and "End your turn here" in text
    assert desk.take_question() == "Numbers only?" and desk.take_question() is None
    assert await served.tool(token, "ask_person", question=" ") == (
        "error: ask_person: 'question' must be a non-empty string", False)
    assert (await served.tool(token, "recall", query="tests"))[1] is False
    assert (await served.tool(token, "propose_memory", text="x"))[1] is False
    assert desk.question is None  # a refused call asked nothing


@pytest.mark.faults
async def test_a_stopped_server_refuses_every_call_and_opens_no_more_runs(served: Served) -> None:
    token = await served.tools.open("run-1", Desk())
    await served.tools.stop()
    reply = await served.call(token, "tools/list")
    assert reply.status_code == 503 and "stopped" in reply.json()["error"]["message"]
    with pytest.raises(Exception, match="stopped"):
        await served.tools.open("run-2", Desk())


async def test_a_run_restored_elsewhere_is_told_its_earlier_session_and_the_answer(sandbox: AsyncSandbox) -> None:
    """The answer came to another process (the CLI's session files ended with the first sandbox):
    a new session starts, told the task, what the earlier one did, the question and the answer."""
    desk = Desk()
    first = StandIn([init(), *assistant(bash("t1", "python3 test_calc.py")), result_of("t1", "Exit code 1"),
                     *assistant({"type": "text", "text": "Asked."}, message_id="msg_2"), done("Asked.", 5)])
    access = replace(ACCESS, tools=ToolAccess("http://t/mcp", "tok"))
    agent = CliAgent(first, sandbox, access, workdir="/workspace", desk=desk)
    desk.question = "Numbers only?"  # as ask_person leaves it, during the CLI's turn
    result = await agent.run("make the test pass")
    assert result.status == "needs_input" and result.question == "Numbers only?"
    saved = json.loads(json.dumps(agent.suspended()))
    second = StandIn([init(), done("Fixed.\n\nAssumptions:\n- none", 5)])
    restored = CliAgent(second, sandbox, access, workdir="/workspace", desk=Desk())
    restored.restore(saved)
    result = await restored.resume("Yes, numbers only.")
    assert result.status == "finished" and result.summary == "Fixed."
    [words] = second.invocations
    assert "--resume" not in words
    prompt = words[words.index("-p") + 1]
    assert prompt.startswith("make the test pass")
    assert "python3 test_calc.py" in prompt and "Exit code 1" in prompt
    assert "answered your question (Numbers only?)" in prompt and "Yes, numbers only." in prompt
    # errand's MCP server is in the CLI's configuration, only that one.
    config = json.loads(words[words.index("--mcp-config") + 1])
    assert config == {"mcpServers": {"errand": {"type": "http", "url": "http://t/mcp",
                                                "headers": {"Authorization": "Bearer ${ERRAND_TOOLS_TOKEN}"}}}}
    assert "--strict-mcp-config" in words and "tok" not in words  # the token is in its environment only
    assert second.env(access)["ERRAND_TOOLS_TOKEN"] == "tok"
