"""Each agent CLI's stream, read line by line into errand's terms (pure: no sandbox, no CLI).

The lines are of the shape the real CLIs print (recorded from the versions the
adapters pin, driven against a loopback wire server); the real CLIs themselves
run in tests/engine/test_<cli>.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from errand.agent import mini_swe_agent
from errand.agent.cli import ModelAccess, ToolAccess
from errand.agent.external import QUIET_SECONDS, quiet_from_environment
from errand.agent.gemini_cli import GeminiCli
from errand.agent.mcp_server import PATH, Desk
from errand.agent.mini_swe_agent import SUBMIT, MiniSweAgent
from errand.agent.opencode import OpenCode
from errand.agent.seam import cli_adapter
from errand.errors import ConfigError

from .streams import ACCESS, read
from .test_mcp_server import Memory, Served
from .test_mcp_server import served as served  # the fixture: errand's MCP server on a gateway of the test's
from .test_opencode import opencode_tool


def test_every_kind_has_its_adapter_and_each_installs_its_pinned_package_under_its_own_prefix() -> None:
    for kind in ("claude-code", "codex", "gemini-cli", "opencode"):
        adapter = cli_adapter(kind, workdir="/workspace")
        assert adapter.kind == kind and adapter.prefix == f"/opt/errand/agents/{kind}"
        [step] = [s for s in adapter.install().steps if s.kind == "run"]
        assert adapter.package in step.args[0] and step.network == "npm"
    mini = cli_adapter("mini-swe-agent", workdir="/workspace")
    [step] = [s for s in mini.install().steps if s.kind == "run"]
    assert "mini-swe-agent==2.4.6" in step.args[0] and step.network == "pip" and mini.prefix == "/root/.local"


def mini_call(call_id: str, command: str, text: str = "") -> dict[str, Any]:
    arguments = json.dumps({"command": command})
    return {"role": "assistant", "content": text, "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": "bash", "arguments": arguments}}]}


def mini_output(call_id: str, output: str, code: int, exception: str = "") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": "{...}",
            "extra": {"raw_output": output, "returncode": code, "exception_info": exception}}


def test_a_mini_swe_agent_trajectory_reads_as_its_steps_as_it_grows_without_the_submit_command() -> None:
    messages = [
        {"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "fix it"},
        mini_call("call_1", "python3 test_calc.py", "Let me run the tests."), mini_output("call_1", "boom\n", 1),
        mini_call("call_2", f"echo {SUBMIT}", "Fixed.\n\nAssumptions:\n- none"),
        mini_output("call_2", "", -1, "action was not executed"),
        {"role": "exit", "content": "", "extra": {"exit_status": "Submitted", "submission": ""}}]
    adapter = MiniSweAgent()
    # The watcher's first line: the trajectory so far, its first step in it; no result yet.
    first = adapter.translate({"messages": messages[:4], "done": False, "exit_code": None})
    assert [(s.kind, s.data.get("id")) for s in first if s.kind != "model"] == [
        ("tool_call", "call_1"), ("output", "call_1"), ("tool_result", "call_1")]
    said = first + adapter.translate({"messages": messages[4:], "done": True, "exit_code": 0})
    steps = [(s.data["content"], [c["name"] for c in s.data["tool_calls"]]) for s in said if s.kind == "model"]
    assert steps == [("Let me run the tests.", ["shell"]), ("Fixed.\n\nAssumptions:\n- none", [])]
    assert len({s.data["call_id"] for s in said if s.kind == "model"}) == 2
    assert [(s.data["id"], s.data["ok"], s.data["exit_code"]) for s in said if s.kind == "tool_result"] == [
        ("call_1", False, 1)]
    [end] = [s for s in said if s.kind == "result"]
    assert end.data["ok"] and end.data["text"] == "Fixed.\n\nAssumptions:\n- none"


def test_a_mini_swe_agent_run_that_did_not_submit_ends_with_its_exit_status() -> None:
    said = read(MiniSweAgent(), [{"messages": [
        {"role": "exit", "content": "", "extra": {"exit_status": "LimitsExceeded"}}], "done": True, "exit_code": 1}])
    assert said[-1].data == {"ok": False, "text": "", "usage": None, "reason": "it ended LimitsExceeded"}
    said = read(MiniSweAgent(), [{"messages": [], "done": True, "exit_code": 2}])
    assert said[-1].data["reason"] == "it exited with code 2 without an exit status"


TOOLS = ToolAccess("http://127.0.0.1:3129/mcp", "errand-mcp-token")
WITH_TOOLS = ModelAccess(ACCESS.base_url, ACCESS.token, ACCESS.model, tools=TOOLS)


def test_gemini_cli_and_opencode_get_errands_mcp_server_with_the_token_only_in_their_environment() -> None:
    gemini = GeminiCli()
    settings = json.loads(gemini.files(WITH_TOOLS, "")["/root/.gemini/settings.json"])
    assert settings["mcpServers"] == {"errand": {"httpUrl": TOOLS.url, "trust": True, "timeout": 120_000,
                                                 "headers": {"Authorization": "Bearer ${ERRAND_TOOLS_TOKEN}"}}}
    assert gemini.env(WITH_TOOLS)["ERRAND_TOOLS_TOKEN"] == TOOLS.token
    assert json.loads(gemini.files(ACCESS, "")["/root/.gemini/settings.json"])["mcpServers"] == {}
    opencode = OpenCode()
    env = opencode.env(WITH_TOOLS)
    config = json.loads(env["OPENCODE_CONFIG_CONTENT"])
    assert config["mcp"] == {"errand": {"type": "remote", "url": TOOLS.url, "enabled": True, "oauth": False,
                                        "timeout": 120_000,
                                        "headers": {"Authorization": "Bearer {env:ERRAND_TOOLS_TOKEN}"}}}
    assert env["ERRAND_TOOLS_TOKEN"] == TOOLS.token
    for adapter in (gemini, opencode):
        everything = json.dumps([adapter.argv("go", "text", WITH_TOOLS, None), adapter.files(WITH_TOOLS, "text"),
                                 {k: v for k, v in adapter.env(WITH_TOOLS).items() if k != "ERRAND_TOOLS_TOKEN"}])
        assert TOOLS.token not in everything


def test_each_cli_s_name_for_errands_tools_reads_as_claude_code_s() -> None:
    said = read(GeminiCli(), [{"type": "tool_use", "tool_name": "mcp_errand_ask_person", "tool_id": "t1",
                               "parameters": {"question": "Numbers only?"}},
                              {"type": "tool_use", "tool_name": "mcp_other_ask_person", "tool_id": "t2"}])
    names = [s.data["name"] for s in said if s.kind == "tool_call"]
    assert names == ["mcp__errand__ask_person", "mcp_other_ask_person"]  # another server's tool: as it came
    said = read(OpenCode(), [opencode_tool("c1", "errand_recall", {"query": "tests"}, "[memory 1] …")])
    [call] = [s.data for s in said if s.kind == "tool_call"]
    assert call == {"id": "c1", "name": "mcp__errand__recall", "arguments": {"query": "tests"}}


def test_the_silence_limit_is_the_worker_s_setting_and_a_bad_one_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ERRAND_CLI_QUIET_SECONDS", raising=False)
    assert quiet_from_environment() == QUIET_SECONDS == 600
    monkeypatch.setenv("ERRAND_CLI_QUIET_SECONDS", "45")
    assert quiet_from_environment() == 45
    for bad in ("0", "-3", "soon", "nan"):
        monkeypatch.setenv("ERRAND_CLI_QUIET_SECONDS", bad)
        with pytest.raises(ConfigError, match="ERRAND_CLI_QUIET_SECONDS") as refused:
            quiet_from_environment()
        assert refused.value.code == "invalid_config"


FAKE_MINI = '''#!/usr/bin/env python3
import json, os, sys, time
path = sys.argv[sys.argv.index("-o") + 1]
messages = []
for n in range(3):
    messages.append({"role": "assistant", "content": f"step {n}"})
    open(path, "w").write(json.dumps({"messages": messages}))
    while not os.path.exists(path + f".read-{n}"):  # the test has read the watcher's line for this step
        time.sleep(0.05)
messages.append({"role": "exit", "content": "", "extra": {"exit_status": "Submitted"}})
open(path, "w").write(json.dumps({"messages": messages}))
print("for a person")
'''


def test_mini_swe_agent_s_watcher_prints_each_step_while_it_runs_and_its_end(tmp_path: Path) -> None:
    """The watcher errand runs mini-swe-agent under (here a stand-in ``mini`` that waits, after each step
    it writes, until the test has read the watcher's line for it: so each line came while it ran)."""
    (tmp_path / "watch.py").write_text(mini_swe_agent.WATCH_SCRIPT)
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "mini").write_text(FAKE_MINI)
    (tmp_path / "bin" / "mini").chmod(0o755)
    trajectory = tmp_path / "run" / "trajectory.json"
    trajectory.parent.mkdir()
    trajectory.write_text(json.dumps({"messages": [{"role": "exit"}]}))  # an earlier run's: not read
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"}
    watcher = subprocess.Popen([sys.executable, str(tmp_path / "watch.py"), str(trajectory), "m", "task"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert watcher.stdout is not None
        for n in range(3):
            line = json.loads(watcher.stdout.readline())
            assert line == {"messages": [{"role": "assistant", "content": f"step {n}"}], "done": False,
                            "exit_code": None}
            assert watcher.poll() is None  # still running
            (tmp_path / "run" / f"trajectory.json.read-{n}").touch()
        end = json.loads(watcher.stdout.readline())
        assert end["done"] and end["exit_code"] == 0 and end["messages"][0]["role"] == "exit"
        assert watcher.wait(60) == 0 and watcher.stderr is not None and "for a person" in watcher.stderr.read()
    finally:
        watcher.kill()
        watcher.wait()


async def test_mini_swe_agent_s_tools_command_asks_recalls_and_is_refused_an_ended_runs_token(
        served: Served, tmp_path: Path) -> None:
    """errand's tools for an agent with no MCP client: the command mini-swe-agent is told of, run as its bash
    runs it, against errand's MCP server on the gateway's listener."""
    script = tmp_path / "errand_tools.py"
    script.write_text(mini_swe_agent.TOOLS_SCRIPT)
    desk = Desk(Memory("ours"))
    token = await served.tools.open("run-1", desk)

    async def command(token: str, *args: str) -> tuple[int, str]:
        env = {**os.environ, "ERRAND_TOOLS_URL": served.gateway.origin + PATH, "ERRAND_TOOLS_TOKEN": token,
               "HTTP_PROXY": "http://192.0.2.1:9"}  # a proxy in its environment is not used for errand's server
        ran = await asyncio.create_subprocess_exec(sys.executable, str(script), *args, env=env,
                                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        out, _ = await ran.communicate()
        return ran.returncode or 0, out.decode()

    code, said = await command(token, "recall", "how to run the tests")
    assert code == 0 and "[memory 1] (command) ours's tests: make test" in said
    code, said = await command(token, "ask_person", "Numbers only?")
    assert code == 0 and "with the person" in said and desk.take_question() == "Numbers only?"
    code, said = await command(token, "ask_person", " ")
    assert code == 1 and "'question' must be a non-empty string" in said and desk.take_question() is None
    code, said = await command(token, "forget", "x")
    assert code == 1 and "usage:" in said
    await served.tools.close("run-1")
    code, said = await command(token, "recall", "tests")
    assert code == 1 and "refused the call (401)" in said and "no live run has this token" in said
