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
from errand.agent.cli import CliAdapter, ModelAccess, Said, ToolAccess
from errand.agent.external import QUIET_SECONDS, quiet_from_environment
from errand.agent.gemini_cli import GeminiCli, shell_result
from errand.agent.mcp_server import PATH, Desk
from errand.agent.mini_swe_agent import SUBMIT, MiniSweAgent
from errand.agent.opencode import OpenCode
from errand.agent.seam import cli_adapter
from errand.errors import ConfigError

from .test_mcp_server import Memory, Served
from .test_mcp_server import served as served  # the fixture: errand's MCP server on a gateway of the test's

ACCESS = ModelAccess("http://127.0.0.1:3129", "errand-gw-token", "test-model")


def read(adapter: CliAdapter, lines: list[dict[str, Any]]) -> list[Said]:
    return [said for line in lines for said in adapter.translate(line)]


def test_every_kind_has_its_adapter_and_each_installs_its_pinned_package_under_its_own_prefix() -> None:
    for kind in ("claude-code", "codex", "gemini-cli", "opencode"):
        adapter = cli_adapter(kind, workdir="/workspace")
        assert adapter.kind == kind and adapter.prefix == f"/opt/errand/agents/{kind}"
        [step] = [s for s in adapter.install().steps if s.kind == "run"]
        assert adapter.package in step.args[0] and step.network == "npm"
    mini = cli_adapter("mini-swe-agent", workdir="/workspace")
    [step] = [s for s in mini.install().steps if s.kind == "run"]
    assert "mini-swe-agent==2.4.6" in step.args[0] and step.network == "pip" and mini.prefix == "/root/.local"


GEMINI_RUN = [
    {"type": "init", "timestamp": "t", "session_id": "a7a1c518", "model": "test-model"},
    {"type": "message", "timestamp": "t", "role": "user", "content": "fix it"},
    {"type": "message", "timestamp": "t", "role": "assistant", "content": "Let me run ", "delta": True},
    {"type": "message", "timestamp": "t", "role": "assistant", "content": "the tests.", "delta": True},
    {"type": "tool_use", "timestamp": "t", "tool_name": "run_shell_command", "tool_id": "run_1",
     "parameters": {"command": "python3 test_calc.py", "description": "run the tests"}},
    {"type": "tool_result", "timestamp": "t", "tool_id": "run_1", "status": "success", "output": "1 failed"},
    {"type": "tool_use", "timestamp": "t", "tool_name": "replace", "tool_id": "replace_2",
     "parameters": {"file_path": "/workspace/calc.py", "old_string": "a - b", "new_string": "a + b",
                    "instruction": "fix"}},
    {"type": "tool_result", "timestamp": "t", "tool_id": "replace_2", "status": "error",
     "error": {"type": "edit_no_occurrence_found", "message": "0 occurrences found"}},
    {"type": "tool_use", "timestamp": "t", "tool_name": "glob", "tool_id": "glob_3", "parameters": {"pattern": "*.py"}},
    {"type": "tool_result", "timestamp": "t", "tool_id": "glob_3", "status": "success", "output": "calc.py"},
    {"type": "message", "timestamp": "t", "role": "assistant", "content": "Done.\n\nAssumptions:\n- none",
     "delta": True},
    {"type": "result", "timestamp": "t", "status": "success",
     "stats": {"total_tokens": 535, "input_tokens": 500, "output_tokens": 35, "cached": 100, "input": 500}},
]


def test_gemini_cli_stream_reads_as_steps_with_errands_tools_and_its_last_message() -> None:
    said = read(GeminiCli("/workspace"), GEMINI_RUN)
    assert said[0] == Said("session", {"id": "a7a1c518"})
    steps = [s for s in said if s.kind == "model"]
    # Each tool call is a step with the text before it; the last message is one more.
    assert [(s.data["content"], [c["name"] for c in s.data["tool_calls"]]) for s in steps] == [
        ("Let me run the tests.", ["shell"]), ("", ["edit_file"]), ("", ["glob"]),
        ("Done.\n\nAssumptions:\n- none", [])]
    calls = [s.data for s in said if s.kind == "tool_call"]
    assert calls[0] == {"id": "run_1", "name": "shell", "arguments": {"command": "python3 test_calc.py"}}
    assert calls[1]["arguments"] == {"path": "calc.py", "old": "a - b", "new": "a + b"}
    assert calls[2] == {"id": "glob_3", "name": "glob", "arguments": {"pattern": "*.py"}}  # not one of errand's
    results = [s.data for s in said if s.kind == "tool_result"]
    assert [(r["name"], r["ok"], r["exit_code"]) for r in results] == [
        ("shell", True, None), ("edit_file", False, None), ("glob", True, None)]
    assert results[1]["content"] == "0 occurrences found"
    assert [s.data for s in said if s.kind == "output"] == [{"id": "run_1", "text": "1 failed\n"}]
    [end] = [s for s in said if s.kind == "result"]
    assert end.data["ok"] and end.data["text"] == "Done.\n\nAssumptions:\n- none"
    usage = end.data["usage"]
    assert (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens) == (500, 35, 100)


def test_a_gemini_cli_run_cut_off_by_its_provider_ends_with_the_cli_s_reason() -> None:
    said = read(GeminiCli(), [
        {"type": "init", "session_id": "s"},
        {"type": "message", "role": "assistant", "content": "Let me", "delta": True},
        {"type": "result", "status": "error", "error": {"type": "unknown", "message": "[API Error: terminated]"},
         "stats": {"total_tokens": 107, "input_tokens": 100, "output_tokens": 7, "cached": 0}}])
    [end] = [s for s in said if s.kind == "result"]
    assert not end.data["ok"] and end.data["reason"] == "[API Error: terminated]"


def test_gemini_cli_is_pointed_at_the_gateway_with_the_run_s_token_and_errand_s_text_in_its_home() -> None:
    adapter = GeminiCli()
    env = adapter.env(ACCESS)
    assert env["GOOGLE_GEMINI_BASE_URL"] == ACCESS.base_url and env["GEMINI_API_KEY"] == "errand-gw-token"
    files = adapter.files(ACCESS, "errand's instructions")
    assert set(files) == {"/root/.gemini/settings.json", "/root/.gemini/GEMINI.md"}
    assert '"selectedType": "gemini-api-key"' in files["/root/.gemini/settings.json"]
    assert files["/root/.gemini/GEMINI.md"] == "errand's instructions\n"
    argv = adapter.argv("fix it", "errand's instructions", ACCESS, None)
    assert argv[:3] == ["gemini", "-p", "fix it"] and "stream-json" in argv and "--resume" not in argv
    assert adapter.argv("more", "", ACCESS, "s-1")[-2:] == ["--resume", "latest"]


def opencode_line(kind: str, part: dict[str, Any]) -> dict[str, Any]:
    return {"type": kind, "timestamp": 0, "sessionID": "ses_1", "part": part}


def opencode_tool(call_id: str, tool: str, given: dict[str, Any], output: str, **metadata: Any) -> dict[str, Any]:
    return opencode_line("tool_use", {"type": "tool", "tool": tool, "callID": call_id, "state": {
        "status": "completed", "input": given, "output": output, "metadata": metadata}})


def finish(reason: str, uncached: int, read: int = 0) -> dict[str, Any]:
    return opencode_line("step_finish", {"type": "step-finish", "reason": reason, "tokens": {
        "total": uncached + read + 7, "input": uncached, "output": 7, "reasoning": 0,
        "cache": {"write": 0, "read": read}}, "cost": 0})


OPENCODE_RUN = [
    opencode_line("step_start", {"messageID": "msg_1", "type": "step-start"}),
    opencode_line("text", {"type": "text", "text": "add() subtracts."}),
    opencode_tool("call_1", "bash", {"command": "python3 test_calc.py", "description": "run"}, "1 failed\n",
                  exit=1),
    opencode_tool("call_2", "edit", {"filePath": "/workspace/calc.py", "oldString": "-", "newString": "+"},
                  "Edit applied successfully."),
    finish("tool-calls", 100),
    opencode_line("step_start", {"messageID": "msg_2", "type": "step-start"}),
    opencode_line("text", {"type": "text", "text": "Fixed.\n\nAssumptions:\n- none"}),
    finish("stop", 50, read=100),
]


def test_opencode_stream_reads_as_steps_with_errands_tools_and_ends_at_its_stop() -> None:
    said = read(OpenCode("/workspace"), OPENCODE_RUN)
    assert {s.data["id"] for s in said if s.kind == "session"} == {"ses_1"}
    steps = [(s.data["call_id"], s.data["content"], [c["name"] for c in s.data["tool_calls"]])
             for s in said if s.kind == "model"]
    # Two tool calls of one model call are one step (the seam counts a call id once).
    assert steps == [("msg_1", "add() subtracts.", ["shell"]), ("msg_1", "", ["edit_file"]),
                     ("msg_2", "Fixed.\n\nAssumptions:\n- none", [])]
    results = [(s.data["name"], s.data["ok"], s.data["exit_code"]) for s in said if s.kind == "tool_result"]
    assert results == [("shell", False, 1), ("edit_file", True, None)]
    calls = [s.data for s in said if s.kind == "tool_call"]
    assert calls[1]["arguments"] == {"path": "calc.py", "old": "-", "new": "+"}
    [end] = [s for s in said if s.kind == "result"]
    assert end.data["ok"] and end.data["text"] == "Fixed.\n\nAssumptions:\n- none"
    usage = end.data["usage"]
    assert (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens) == (250, 14, 100)


def test_an_opencode_error_ends_the_run_with_the_provider_s_message() -> None:
    said = read(OpenCode(), [
        opencode_line("step_start", {"messageID": "msg_1"}),
        {"type": "error", "timestamp": 0, "sessionID": "ses_1", "error": {"name": "APIError", "data": {
            "message": "bad request here", "statusCode": 400, "isRetryable": False}}}])
    [end] = [s for s in said if s.kind == "result"]
    assert not end.data["ok"] and end.data["reason"] == "bad request here"


def test_opencode_reads_its_provider_from_its_environment_and_errand_s_text_from_its_home() -> None:
    adapter = OpenCode()
    env = adapter.env(ACCESS)
    config = json.loads(env["OPENCODE_CONFIG_CONTENT"])
    options = config["provider"]["errand"]["options"]
    assert options == {"baseURL": ACCESS.base_url, "apiKey": "{env:ERRAND_MODEL_TOKEN}"}
    assert env["ERRAND_MODEL_TOKEN"] == "errand-gw-token" and "errand-gw-token" not in env["OPENCODE_CONFIG_CONTENT"]
    assert config["instructions"] == ["/root/.config/opencode/errand.md"]
    assert adapter.files(ACCESS, "errand's text") == {"/root/.config/opencode/errand.md": "errand's text\n"}
    assert adapter.argv("go on", "", ACCESS, "ses_1")[-3:] == ["--session", "ses_1", "go on"]


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


# A failing command as Gemini CLI 0.61.0's stream gives it in debug mode (recorded against a loopback server).
GEMINI_FAILED = {"type": "tool_result", "timestamp": "t", "tool_id": "run_shell_command__1", "status": "success",
                 "output": "Output: 1 failed\nExit Code: 1\nProcess Group PGID: 25702"}


def test_a_gemini_cli_command_that_failed_has_its_exit_code_and_is_no_success() -> None:
    adapter = GeminiCli()
    assert "--debug" in adapter.argv("fix it", "", ACCESS, None)
    said = read(adapter, [{"type": "tool_use", "tool_name": "run_shell_command", "tool_id": "run_shell_command__1",
                           "parameters": {"command": "python3 test_calc.py"}}, GEMINI_FAILED,
                          {"type": "tool_use", "tool_name": "run_shell_command", "tool_id": "run_shell_command__2",
                           "parameters": {"command": "true"}},
                          {"type": "tool_result", "tool_id": "run_shell_command__2", "status": "success",
                           "output": "Output: (empty)\nProcess Group PGID: 25703"}])
    results = [(s.data["ok"], s.data["exit_code"], s.data["content"]) for s in said if s.kind == "tool_result"]
    assert results == [(False, 1, "1 failed"), (True, 0, "")]
    assert [s.data["text"] for s in said if s.kind == "output"] == ["1 failed\n", "\n"]


def test_gemini_cli_s_shell_sections_are_read_from_the_end_only() -> None:
    assert shell_result("Output: Exit Code: 9\nok\nProcess Group PGID: 2") == ("Exit Code: 9\nok", 0)
    assert shell_result("Output: x\nError: spawn bash ENOENT\nExit Code: 127") == ("x", 127)
    assert shell_result("Output: \nSignal: 9\nProcess Group PGID: 2") == ("", None)
    assert shell_result("Command moved to background (PID: 7).") == ("Command moved to background (PID: 7).", None)


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
