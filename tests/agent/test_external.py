"""An agent CLI behind errand's seam, with a stand-in CLI in a real sandbox.

The stand-in prints what Claude Code's ``--output-format stream-json --verbose``
prints (lines of the shape recorded from Claude Code 2.1.332) and behaves as a
CLI does on a bad day: it loops on one command, runs past its budget, dies at
start, prints nothing. The real Claude Code is driven in
tests/engine/test_claude_code.py; this is the agent's side of the seam, row by row.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

import pytest

from errand.agent import Budgets
from errand.agent.claude_code import ClaudeCode
from errand.agent.external import CliAgent, ModelAccess
from errand.sandbox import AsyncSandbox

ACCESS = ModelAccess("http://127.0.0.1:3129", "errand-gw-token", "test-model")
USAGE = {"input_tokens": 10, "output_tokens": 1, "cache_read_input_tokens": 100, "cache_creation_input_tokens": 5}
MARK = "errand-stand-in-cli"


def init() -> dict[str, Any]:
    return {"type": "system", "subtype": "init", "session_id": "s-1", "model": "test-model"}


def assistant(*blocks: dict[str, Any], message_id: str = "msg_1") -> list[dict[str, Any]]:
    """A model call: one line per content block, each with the call's usage as the stream began."""
    return [{"type": "assistant", "message": {"id": message_id, "role": "assistant", "content": [block],
                                              "stop_reason": None, "usage": USAGE}} for block in blocks]


def bash(call_id: str, command: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": "Bash", "input": {"command": command, "description": "x"}}


def result_of(call_id: str, content: str, error: bool = False) -> dict[str, Any]:
    return {"type": "user", "message": {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": call_id, "content": content, "is_error": error}]}}


def done(text: str, output_tokens: int) -> dict[str, Any]:
    return {"type": "result", "subtype": "success", "is_error": False, "result": text, "session_id": "s-1",
            "usage": {"input_tokens": 0, "output_tokens": output_tokens, "cache_read_input_tokens": 0,
                      "cache_creation_input_tokens": 0}}


class StandIn(ClaudeCode):
    """Claude Code's stream and flags, printed by a script: ``lines`` on the first invocation,
    ``resumed`` on one with ``--resume``; then ``then`` (a shell command: ``sleep 600``, ``exit 3``)."""

    def __init__(self, lines: list[dict[str, Any]], *, resumed: list[dict[str, Any]] | None = None,
                 then: str = "", stderr: str = "") -> None:
        super().__init__("/workspace")
        self.lines, self.resumed, self.then, self.stderr = lines, resumed or [], then, stderr
        self.invocations: list[list[str]] = []

    def argv(self, prompt: str, system: str, access: ModelAccess, session: str | None) -> list[str]:
        words = super().argv(prompt, system, access, session)
        self.invocations.append(words)
        lines = self.resumed if session else self.lines
        printed = "".join(json.dumps(line) + "\n" for line in lines)
        script = f"printf %s {shlex.quote(printed)}; printf %s {shlex.quote(self.stderr)} >&2; {self.then}"
        return ["sh", "-c", script, MARK]


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    async def __call__(self, kind: str, data: dict[str, Any]) -> None:
        self.events.append((kind, data))

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [data for seen, data in self.events if seen == kind]


async def left_running(sandbox: AsyncSandbox) -> str:
    process = await sandbox.exec("sh", "-c", "ps -eo args | grep -F 'sleep 600' | grep -v grep || true")
    return (await process.result()).stdout


async def test_a_run_reads_as_errand_agents_own(sandbox: AsyncSandbox) -> None:
    cli = StandIn([init(), *assistant({"type": "text", "text": "Running the tests."}, bash("t1", "python3 t.py")),
                   result_of("t1", "Exit code 1\nAssertionError", error=True),
                   *assistant({"type": "tool_use", "id": "t2", "name": "Edit", "input": {
                       "file_path": "/workspace/calc.py", "old_string": "a - b", "new_string": "a + b"}},
                       message_id="msg_2"),
                   result_of("t2", "The file /workspace/calc.py has been updated successfully."),
                   *assistant({"type": "text", "text": "Fixed.\n\nAssumptions:\n- none beyond add()\n"},
                              message_id="msg_3"),
                   done("Fixed add().\n\nAssumptions:\n- add() takes numbers", output_tokens=60)])
    events = Recorder()
    agent = CliAgent(cli, sandbox, ACCESS, workdir="/workspace", on_event=events, instructions="Use tabs.",
                     memories="The tests are in t.py.")
    result = await agent.run("make the test pass")
    assert result.status == "finished"
    assert result.summary == "Fixed add()." and result.assumptions == ["add() takes numbers"]
    # Three model calls, though the first came on two lines; each counted once, with its tokens.
    assert result.spent.steps == 3 and len(events.of("model")) == 4
    assert [e["tool_calls"] for e in events.of("model")][1] == [
        {"id": "t1", "name": "shell", "arguments": {"command": "python3 t.py"}}]
    assert events.of("tool_call")[1] == {"step": 2, "id": "t2", "name": "edit_file",
                                         "arguments": {"path": "calc.py", "old": "a - b", "new": "a + b"}}
    assert events.of("tool_result")[0] | {"content": ""} == {"step": 1, "id": "t1", "name": "shell", "ok": False,
                                                             "exit_code": 1, "content": ""}
    assert events.of("output")[0]["text"] == "Exit code 1\nAssertionError\n"
    # Each call's prompt, and the output tokens only the result's total gives.
    assert result.spent.input_tokens == 3 * 115 and result.spent.output_tokens == 60
    assert result.spent.tokens == 3 * 115 + 60
    assert events.of("exit")[0]["status"] == "finished"
    # The instructions and memories go to the CLI's system prompt; the key never: only the token.
    words = cli.invocations[0]
    system = words[words.index("--append-system-prompt") + 1]
    assert "Use tabs." in system and "The tests are in t.py." in system and "Assumptions:" in system
    assert cli.env(ACCESS)["ANTHROPIC_AUTH_TOKEN"] == "errand-gw-token"
    assert result.messages[0].role == "system" and result.messages[1].content == "make the test pass"


@pytest.mark.faults
async def test_the_same_command_again_and_again_is_stuck_and_the_cli_is_stopped(sandbox: AsyncSandbox) -> None:
    lines = [init()]
    for n in range(1, 6):
        lines += [*assistant(bash(f"t{n}", "make"), message_id=f"msg_{n}"), result_of(f"t{n}", "make: nothing")]
    cli = StandIn(lines, then="sleep 600")
    agent = CliAgent(cli, sandbox, ACCESS, workdir="/workspace", budgets=Budgets(max_repeats=3))
    result = await agent.run("build it")
    assert result.status == "stuck"
    assert "the same tool call 3 times in a row: shell" in result.detail
    assert await left_running(sandbox) == ""


@pytest.mark.faults
async def test_a_step_budget_stops_the_cli(sandbox: AsyncSandbox) -> None:
    lines = [init()]
    for n in range(1, 5):
        lines += [*assistant(bash(f"t{n}", f"echo {n}"), message_id=f"msg_{n}"), result_of(f"t{n}", str(n))]
    cli = StandIn(lines, then="sleep 600")
    result = await CliAgent(cli, sandbox, ACCESS, workdir="/workspace", budgets=Budgets(max_steps=2)).run("go")
    assert result.status == "budget_exhausted" and result.budget == "steps"
    assert result.spent.steps == 2
    assert await left_running(sandbox) == ""


@pytest.mark.faults
async def test_a_cli_that_dies_at_start_says_why(sandbox: AsyncSandbox) -> None:
    cli = StandIn([], then="exit 2", stderr="error: unknown option '--frobnicate'\n")
    result = await CliAgent(cli, sandbox, ACCESS, workdir="/workspace").run("go")
    assert result.status == "error"
    assert result.detail == ("claude-code exited with code 2 before it gave a result: "
                             "error: unknown option '--frobnicate'")


@pytest.mark.faults
async def test_a_cli_that_prints_nothing_is_taken_for_hung(sandbox: AsyncSandbox) -> None:
    cli = StandIn([init()], then="sleep 600")
    result = await CliAgent(cli, sandbox, ACCESS, workdir="/workspace", quiet_seconds=1.0).run("go")
    assert result.status == "error"
    assert result.detail == "claude-code had printed nothing for 1s, and was stopped (taken for hung)"
    assert await left_running(sandbox) == ""


async def test_a_message_sent_while_it_works_is_its_next_prompt_in_the_same_session(sandbox: AsyncSandbox) -> None:
    cli = StandIn([init(), *assistant({"type": "text", "text": "Done."}), done("Done.", 5)],
                  resumed=[init(), *assistant({"type": "text", "text": "Also done."}, message_id="msg_9"),
                           done("Did that too.", 5)])
    events = Recorder()
    agent = CliAgent(cli, sandbox, ACCESS, workdir="/workspace", on_event=events)
    agent.send_message("also update the README", ref=7)
    result = await agent.run("go")
    assert result.status == "finished" and result.summary == "Did that too."
    assert events.of("message_delivered") == [{"step": 1, "text": "also update the README", "ref": 7}]
    second = cli.invocations[1]
    assert second[second.index("--resume") + 1] == "s-1"
    assert "also update the README" in second[second.index("-p") + 1]
