"""OpenCode's stream read line by line into errand's terms, its command line, environment and
configuration files (pure: no sandbox, no CLI; the real CLI runs in tests/engine/test_opencode.py).

The lines are of the shape the real CLI prints (recorded from the version the adapter pins, driven
against a loopback wire server)."""

from __future__ import annotations

import json
from typing import Any

from errand.agent.opencode import OpenCode

from .streams import ACCESS, read


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
