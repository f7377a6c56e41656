"""Codex's stream read line by line into errand's terms, its command line and environment (pure: no
sandbox, no CLI; the real CLI runs in tests/engine/test_codex.py).

The lines are of the shape ``codex exec --json`` prints: ``thread.started``, ``item.started`` and
``item.completed`` for each item of the turn, then ``turn.completed`` or ``turn.failed``."""

from __future__ import annotations

import json
from typing import Any

from errand.agent.cli import ModelAccess, ToolAccess
from errand.agent.codex import PACKAGE, Codex

from .streams import ACCESS, read


def item(event: str, **fields: Any) -> dict[str, Any]:
    return {"type": event, "item": fields}


CODEX_RUN = [
    {"type": "thread.started", "thread_id": "0199-thread"},
    {"type": "turn.started"},
    item("item.started", id="item_0", type="command_execution", command="/bin/bash -lc 'python3 test_calc.py'",
         aggregated_output="", exit_code=None, status="in_progress"),
    item("item.completed", id="item_0", type="command_execution", command="/bin/bash -lc 'python3 test_calc.py'",
         aggregated_output="1 failed\n", exit_code=1, status="failed"),
    item("item.completed", id="item_1", type="file_change", status="completed",
         changes=[{"path": "/workspace/calc.py", "kind": "update"}, {"path": "/tmp/notes", "kind": "add"}]),
    item("item.completed", id="item_2", type="agent_message", text="Fixed.\n\nAssumptions:\n- none"),
    {"type": "turn.completed",
     "usage": {"input_tokens": 1200, "cached_input_tokens": 1000, "output_tokens": 40}},
]


def test_a_codex_turn_reads_as_a_step_per_item_with_errands_tools_and_ends_with_its_last_message() -> None:
    said = read(Codex("/workspace"), CODEX_RUN)
    assert said[0].kind == "session" and said[0].data == {"id": "0199-thread"}
    steps = [(s.data["call_id"], s.data["content"], [c["name"] for c in s.data["tool_calls"]])
             for s in said if s.kind == "model"]
    assert steps == [("item_0", "", ["shell"]), ("item_1", "", ["apply_patch"]),
                     ("item_2", "Fixed.\n\nAssumptions:\n- none", [])]
    calls = [s.data for s in said if s.kind == "tool_call"]
    # The command as the model gave it, out of Codex's bash -lc wrapping; paths relative to the workdir.
    assert calls[0] == {"id": "item_0", "name": "shell", "arguments": {"command": "python3 test_calc.py"}}
    assert calls[1]["arguments"] == {"changes": [{"path": "calc.py", "kind": "update"},
                                                 {"path": "/tmp/notes", "kind": "add"}]}
    assert [s.data for s in said if s.kind == "output"] == [{"id": "item_0", "text": "1 failed\n"}]
    results = [(s.data["name"], s.data["ok"], s.data["exit_code"]) for s in said if s.kind == "tool_result"]
    assert results == [("shell", False, 1), ("apply_patch", True, None)]
    [end] = [s for s in said if s.kind == "result"]
    assert end.data["ok"] and end.data["text"] == "Fixed.\n\nAssumptions:\n- none" and end.data["reason"] is None
    usage = end.data["usage"]
    assert (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens, usage.uncached_input_tokens) == (
        1200, 40, 1000, 200)


def test_a_failed_turn_ends_with_its_error_or_the_last_error_line_or_a_reason_of_its_own() -> None:
    said = read(Codex(), [item("item.completed", id="m", type="agent_message", text="Looking."),
                          {"type": "turn.failed", "error": {"message": "stream disconnected"}}])
    assert said[-1].data == {"ok": False, "text": "Looking.", "reason": "stream disconnected", "usage": None}
    said = read(Codex(), [{"type": "error", "message": "unexpected status 401"}, {"type": "turn.failed"}])
    assert said == [said[-1]] and said[-1].data["reason"] == "unexpected status 401"
    assert read(Codex(), [{"type": "turn.failed", "error": "not a mapping"}])[-1].data["reason"] == "the turn failed"


def test_a_failed_patch_and_a_failed_or_erring_tool_call_of_errands_server_are_no_success() -> None:
    said = read(Codex(), [
        item("item.completed", id="p", type="file_change", status="failed", changes=[]),
        item("item.started", id="t", type="mcp_tool_call", server="errand", tool="recall",
             arguments={"query": "tests"}, status="in_progress"),
        item("item.completed", id="t", type="mcp_tool_call", server="errand", tool="recall", status="completed",
             result={"content": [{"type": "text", "text": "[memory 1] "}, {"type": "text", "text": "use pytest"}]}),
        item("item.completed", id="u", type="mcp_tool_call", server="errand", tool="ask_person", status="completed",
             result={"content": [{"type": "text", "text": "refused"}], "is_error": True}),
        item("item.completed", id="v", type="mcp_tool_call", server="errand", tool="ask_person", status="failed",
             error={"message": "tool call timed out"})])
    [call] = [s.data for s in said if s.kind == "tool_call" and s.data["id"] == "t"]
    assert call == {"id": "t", "name": "mcp__errand__recall", "arguments": {"query": "tests"}}
    results = [(s.data["id"], s.data["ok"], s.data["content"]) for s in said if s.kind == "tool_result"]
    assert results == [("p", False, "the patch failed"), ("t", True, "[memory 1] \nuse pytest"),
                       ("u", False, "refused"), ("v", False, "tool call timed out")]


def test_a_command_not_wrapped_by_a_shell_or_unreadable_as_words_is_taken_as_it_came() -> None:
    for command in ("python3 -m pytest", "/bin/bash -lc 'a' 'b'", "/bin/bash -lc 'unclosed"):
        said = read(Codex(), [item("item.started", id="c", type="command_execution", command=command)])
        [call] = [s.data for s in said if s.kind == "tool_call"]
        assert call["arguments"] == {"command": command}
    assert read(Codex(), [item("item.started", id="m", type="agent_message", text="half"),
                          {"type": "turn.completed", "usage": "none"}])[-1].data["text"] == ""


def test_codex_reaches_only_the_gateway_through_its_configuration_with_the_run_s_token_in_its_environment() -> None:
    codex = Codex()
    argv = codex.argv("fix it", 'errand says "hi"', ACCESS, None)
    assert argv[:3] == ["sh", "-c", 'mkdir -p "$CODEX_HOME" && exec codex "$@"'] and argv[-1] == "fix it"
    flags = argv[4:]
    assert flags[:2] == ["exec", "--json"] and "--dangerously-bypass-approvals-and-sandbox" in flags
    settings = [flags[i + 1] for i, flag in enumerate(flags) if flag == "-c"]
    assert "model_provider=errand" in settings and f"model={json.dumps(ACCESS.model)}" in settings
    assert (f'model_providers.errand={{name="errand", base_url={json.dumps(ACCESS.base_url)}, '
            'env_key="ERRAND_MODEL_TOKEN", wire_api="responses"}') in settings
    assert 'developer_instructions="errand says \\"hi\\""' in settings
    assert ACCESS.token not in json.dumps(argv) and "resume" not in argv
    assert codex.argv("go on", "", ACCESS, "0199-thread")[-3:] == ["resume", "0199-thread", "go on"]
    env = codex.env(ACCESS)
    assert env["ERRAND_MODEL_TOKEN"] == ACCESS.token and env["CODEX_HOME"] == "/root/.codex"
    assert codex.files(ACCESS, "text") == {} and codex.package == PACKAGE and PACKAGE.startswith("@openai/codex@")


def test_codex_gets_errands_tools_server_with_its_token_only_in_its_environment() -> None:
    tools = ToolAccess("http://127.0.0.1:3129/mcp", "errand-mcp-token")
    access = ModelAccess(ACCESS.base_url, ACCESS.token, ACCESS.model, tools=tools)
    codex = Codex()
    argv = codex.argv("fix it", "", access, None)
    [server] = [flag for flag in argv if flag.startswith("mcp_servers.errand=")]
    assert json.dumps(tools.url) in server and 'bearer_token_env_var="ERRAND_TOOLS_TOKEN"' in server
    assert codex.env(access)["ERRAND_TOOLS_TOKEN"] == tools.token and tools.token not in json.dumps(argv)
    assert not [flag for flag in codex.argv("fix it", "", ACCESS, None) if flag.startswith("mcp_servers.")]
