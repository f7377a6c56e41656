"""What every agent CLI's adapter shares: where it is installed, its tool calls in errand's names
and paths, and model and tool access whose tokens never show in a repr."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from errand.agent.cli import AGENTS_ROOT, CliAdapter, ModelAccess, Said, ToolAccess, model_step


class Plain(CliAdapter):
    """An adapter of the shape of the real ones, for what they inherit."""

    kind = "plain"
    provider = "openai"
    protocol = "openai-chat"
    package = "plain-agent@1.0.0"
    binary = "plain"

    def argv(self, prompt: str, system: str, access: ModelAccess, session: str | None) -> list[str]:
        return [self.binary, prompt]

    def translate(self, line: Mapping[str, Any]) -> list[Said]:
        return []


class PipPlain(Plain):
    registry = "pip"
    package = "plain-agent==1.0.0"


SAME = {"write": ("write_file", {"path": "file_path", "content": "content"}), "sh": ("shell", {"command": "cmd"})}


def test_a_tool_that_is_errands_by_another_name_is_called_by_errands_name_with_errands_arguments() -> None:
    adapter = Plain("/workspace")
    call = adapter.tool_call("c1", "write", {"file_path": "/workspace/src/a.py", "content": "x", "mode": "w"}, SAME)
    assert call == {"id": "c1", "name": "write_file", "arguments": {"path": "src/a.py", "content": "x"}}
    # An argument it did not give is left out, not invented.
    assert adapter.tool_call("c2", "sh", {}, SAME) == {"id": "c2", "name": "shell", "arguments": {}}
    # Another tool comes as it came; arguments that are no mapping are none.
    assert adapter.tool_call("c3", "web_fetch", {"url": "u"}, SAME) == {
        "id": "c3", "name": "web_fetch", "arguments": {"url": "u"}}
    assert adapter.tool_call("c4", "web_fetch", "not a mapping", SAME)["arguments"] == {}


def test_paths_inside_the_workdir_read_relative_and_those_outside_it_as_they_came() -> None:
    adapter = Plain("/workspace")
    assert adapter.relative("/workspace/src/../calc.py") == "calc.py"
    assert adapter.relative("/workspace") == "."
    assert adapter.relative("calc.py") == "calc.py"
    assert adapter.relative("/workspace-old/calc.py") == "/workspace-old/calc.py"
    assert adapter.relative("/workspace/../etc/passwd") == "/workspace/../etc/passwd"
    assert Plain("/repo").relative("/repo/x") == "x"


def test_an_npm_package_is_installed_under_the_cli_s_own_prefix_and_a_pip_one_in_the_user_s_home() -> None:
    npm, pip = Plain(), PipPlain()
    assert npm.prefix == f"{AGENTS_ROOT}/plain" and pip.prefix == "/root/.local"
    [step] = [s for s in npm.install().steps if s.kind == "run"]
    assert "plain-agent@1.0.0" in step.args[0] and step.network == "npm"
    [step] = [s for s in pip.install().steps if s.kind == "run"]
    assert "plain-agent==1.0.0" in step.args[0] and step.network == "pip"
    assert npm.env(ModelAccess("http://gw", "t", "m")) == {} and npm.files(ModelAccess("http://gw", "t", "m"), "") == {}


def test_the_run_s_tokens_never_show_in_a_repr() -> None:
    tools = ToolAccess("http://127.0.0.1:3129/mcp", "secret-tools-token")
    access = ModelAccess("http://127.0.0.1:3129", "secret-model-token", "m", relay="10.0.0.1:3129", tools=tools)
    shown = repr(access) + repr(tools) + str(access)
    assert "secret-" not in shown and "http://127.0.0.1:3129" in shown and "'m'" in shown


def test_a_model_step_carries_what_it_said_its_calls_and_its_tokens() -> None:
    step = model_step("msg_1", "Let me look.", [{"id": "c", "name": "shell", "arguments": {}}], stop="tool_use")
    assert step == Said("model", {"call_id": "msg_1", "content": "Let me look.",
                                  "tool_calls": [{"id": "c", "name": "shell", "arguments": {}}], "stop": "tool_use"})
    assert step.usage is None
