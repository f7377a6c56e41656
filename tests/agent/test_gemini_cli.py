"""Gemini CLI's stream read line by line into errand's terms, its command line, environment and
configuration files (pure: no sandbox, no CLI; the real CLI runs in tests/engine/test_gemini_cli.py).

The lines are of the shape the real CLI prints (recorded from the version the adapter pins, driven
against a loopback wire server)."""

from __future__ import annotations

from typing import Any

from errand.agent.cli import Said
from errand.agent.gemini_cli import GeminiCli, shell_result

from .streams import ACCESS, read

GEMINI_RUN: list[dict[str, Any]] = [
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
