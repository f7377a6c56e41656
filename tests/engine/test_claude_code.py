"""Claude Code as a task's agent: the real CLI, from the npm registry, in the task's sandbox.

The test plays the model on a loopback wire server speaking Anthropic's messages
API (streaming). The worker's model gateway stands between: the CLI in the
sandbox holds a token of its run's own and reaches the gateway through the
sandbox's relay; the gateway swaps the token for the key, which is in the
worker's environment as a real one would be. The model's own turns look for
the key everywhere the sandbox can read.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from errand.agent.claude_code import ClaudeCode
from errand.sandbox import AsyncSandbox
from errand.tasks.lifecycle import TaskState
from errand.tasks.service import TaskService
from errand.tasks.store import TaskStore
from models.provider_wire import Provider, Turn
from models.wire import Answer, Hang, Recorded, WireServer

from .harness import make_repo, running_engine, wait_for_state

pytestmark = [pytest.mark.slow, pytest.mark.network]

KEY = "sk-ant-test-" + secrets.token_hex(16)  # the worker's key: it must never reach the sandbox
FAILING = "python3 test_calc.py"


@pytest.fixture
def wire() -> Iterator[WireServer]:
    server = WireServer().start()
    yield server
    server.stop()


@pytest.fixture
def keyed(monkeypatch: pytest.MonkeyPatch, wire: WireServer) -> None:
    """The worker's key, and the task's endpoint: the wire server, as a provider's URL would be."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", wire.url)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("ERRAND_ANTHROPIC_BASE_URL", raising=False)


def audit(key: str = KEY) -> str:
    """A command that prints every environment and command line in the sandbox, and the files that
    hold the key (the key itself is not in the command: it is spelt backwards and turned round). A
    probe file it writes with the key shows the search finds what is there."""
    backwards = key[::-1]
    return ("cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | sort -u; "
            "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done; "
            f"K=$(python3 -c \"print('{backwards}'[::-1])\"); echo \"$K\" > /tmp/errand-audit-probe; "
            "grep -rIl --exclude-dir=proc --exclude-dir=sys --exclude-dir=usr --exclude-dir=dev -e \"$K\" / "
            "2>/dev/null | sed \"s/^/$(printf 'KEY%sFILE: ' -)/\"; echo audit-done")


def fix_turns() -> Callable[[int], Turn]:
    script = [
        Turn("Let me see what the sandbox holds.", [("toolu_1", "Bash", {"command": audit(), "description": "audit"})]),
        Turn("", [("toolu_2", "Bash", {"command": FAILING, "description": "run the tests"})]),
        Turn("", [("toolu_3", "Read", {"file_path": "/workspace/calc.py"})]),
        Turn("add() subtracts.", [("toolu_4", "Edit", {"file_path": "/workspace/calc.py",
                                                         "old_string": "return a - b", "new_string": "return a + b"})]),
        Turn("", [("toolu_5", "Bash", {"command": FAILING, "description": "run the tests again"})]),
        Turn("add() subtracted; now it adds, and the test passes.\n\nAssumptions:\n- only add() was wrong"),
    ]
    return lambda step: script[min(step, len(script)) - 1]


def from_the_cli(request: Recorded) -> bool:
    """A request Claude Code made (it asks for the beta API), not errand's own distilling on the host."""
    return "beta=true" in request.path


def tool_results(requests: list[Recorded]) -> dict[str, str]:
    """Every tool result the CLI sent back to the model, by its call's id."""
    found: dict[str, str] = {}
    for request in requests:
        for message in (request.body or {}).get("messages", []):
            for block in message.get("content") if isinstance(message.get("content"), list) else []:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    content = block.get("content")
                    text = content if isinstance(content, str) else json.dumps(content)
                    found[str(block.get("tool_use_id"))] = text
    return found


def submit(store: TaskStore, tmp_path: Path, *, toml: str = '[test]\ncommand = "python3 test_calc.py"\n',
           model: str = "anthropic:test-model", agent: str = "claude-code") -> str:
    repo = make_repo(tmp_path / "project", toml=toml)
    instruction = f"Make the failing test pass ({uuid.uuid4().hex[:8]})"
    task = TaskService(store).submit(instruction, repo=str(repo), model=model, agent=agent)
    assert task.agent == agent
    return task.id


def claude_processes(task_id: str, store: TaskStore) -> list[str]:
    """Host processes that are this task's CLI (its prompt names the task's unique instruction)."""
    marker = store.get_task(task_id).instruction.encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if marker in cmdline and state != "Z":
                found.append(cmdline.replace(b"\0", b" ").decode(errors="replace")[:200])
    return found


async def task_sandboxes(task_id: str) -> list[str]:
    return [info.id for info in await AsyncSandbox.list() if info.labels.get("task") == task_id]


async def test_claude_code_fixes_a_failing_test_with_its_own_tools_and_never_holds_the_key(
        keyed: None, wire: WireServer, tmp_path: Path) -> None:
    def check(request: Recorded) -> str | None:
        if not from_the_cli(request):
            return None  # errand's own distilling call on the host: not the gateway's to key
        if request.headers.get("x-api-key") != KEY:  # the gateway put the key in, on the host
            return (f"not the worker's key: {request.headers.get('x-api-key')!r} on {request.path} "
                    f"(headers: {sorted(request.headers)})")
        if "errand-gw-" in json.dumps(request.headers):
            return "the run's token went on to the provider"
        return None

    provider = Provider("anthropic", fix_turns(), streaming=True, check=check)
    cli_usages: list[dict[str, Any]] = []

    def respond(request: Recorded) -> Answer:
        answer = provider(request)
        if from_the_cli(request):  # not errand's own call, distilling memories on the host after the run
            cli_usages.append(provider.usages[-1])
        return answer

    wire.respond(respond)
    with TaskStore.open(f"sqlite:///{tmp_path / 'errand.db'}") as store:
        task_id = submit(store, tmp_path)
        async with running_engine(store, default_model="anthropic:test-model"):
            task = await wait_for_state(store, task_id, TaskState.READY_FOR_REVIEW, TaskState.FAILED, seconds=900)
        events = store.events(task_id, 0, 100_000)
        assert task.state is TaskState.READY_FOR_REVIEW, [(e.kind, e.data) for e in events][-10:]
        [run] = store.runs(task_id)
        outcome = run.outcome
        assert outcome is not None
        # A reviewable diff with its evidence: the tests failed on the base and pass after.
        assert outcome.status == "finished"
        assert "+    return a + b" in outcome.patch and "-    return a - b" in outcome.patch
        assert outcome.summary == "add() subtracted; now it adds, and the test passes."
        assert outcome.assumptions == ["only add() was wrong"]
        evidence = outcome.evidence
        assert evidence["tests_before"]["exit_code"] != 0
        assert evidence["tests_after"]["exit_code"] == 0
        assert [f["path"] for f in evidence["files"]] == ["calc.py"]
        assert evidence["commands_run"] == 3  # the audit and the tests twice, as errand's journal counts them
        # The log reads as errand's own agent's: its tools by errand's names, each model call with its tokens.
        kinds = [e.kind for e in events]
        started = next(e for e in events if e.kind == "round_started")
        assert started.data["agent"] == "claude-code"
        calls = [(e.data["name"], e.data["arguments"]) for e in events if e.kind == "tool_call"]
        assert ("read_file", {"path": "calc.py"}) in calls
        assert ("edit_file", {"path": "calc.py", "old": "return a - b", "new": "return a + b"}) in calls
        assert [args["command"] for name, args in calls if name == "shell"][1:] == [FAILING, FAILING]
        assert kinds.count("exit") == 1
        # Steps are the model calls of its stream; tokens are what the gateway metered, which is what the
        # wire server served (a call the CLI makes on the side, which its stream does not show, included).
        spent = outcome.spent
        wire_tokens = sum(u["input_tokens"] + u["cache_read_input_tokens"] + u["cache_creation_input_tokens"]
                          + u["output_tokens"] for u in cli_usages)
        assert spent["steps"] == len(cli_usages) == 6
        assert spent["tokens"] == wire_tokens
        # The key: not in the CLI's requests, not in any environment, command line or file in the sandbox.
        assert provider.problems == []
        audit_output = tool_results(wire.requests)["toolu_1"]
        assert "audit-done" in audit_output and "ANTHROPIC_AUTH_TOKEN=errand-gw-" in audit_output
        assert KEY not in audit_output
        assert [line for line in audit_output.splitlines() if "KEY-FILE: " in line] == \
            ["KEY-FILE: /tmp/errand-audit-probe"]
        # The gateway kept the run's calls as its transcript, without the key or the token.
        transcript = (Path(os.environ["ERRAND_HOME"]) / "transcripts" / f"{run.id}.jsonl").read_text()
        assert "/v1/messages" in transcript and KEY not in transcript and "errand-gw-" not in transcript
        # Nothing of the run is left: no sandbox of the task, no CLI process.
        assert await task_sandboxes(task_id) == []
        assert claude_processes(task_id, store) == []


@pytest.mark.faults
async def test_a_cli_that_exits_at_start_ends_its_run_with_its_reason(
        keyed: None, wire: WireServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_argv = ClaudeCode.argv
    monkeypatch.setattr(ClaudeCode, "argv", lambda self, *a: [*real_argv(self, *a), "--no-such-option"])
    wire.respond(Provider("anthropic", fix_turns(), streaming=True))
    with TaskStore.open(f"sqlite:///{tmp_path / 'errand.db'}") as store:
        task_id = submit(store, tmp_path)
        async with running_engine(store, default_model="anthropic:test-model"):
            task = await wait_for_state(store, task_id, TaskState.READY_FOR_REVIEW, TaskState.FAILED, seconds=900)
        assert task.state is TaskState.FAILED
        [run] = store.runs(task_id)
        assert run.result["status"] == "error"
        assert "claude-code exited with code 1 before it gave a result" in run.result["detail"]
        assert "no-such-option" in run.result["detail"]  # what the CLI said, so a person sees why
        assert [request for request in wire.requests if from_the_cli(request)] == []
        assert await task_sandboxes(task_id) == []
        assert claude_processes(task_id, store) == []


@pytest.mark.faults
async def test_a_cli_that_hangs_is_stopped_at_the_time_budget_and_leaves_nothing_running(
        keyed: None, wire: WireServer, tmp_path: Path) -> None:
    wire.respond(lambda _request: Hang())  # the model never answers; the CLI waits on it, printing nothing
    toml = '[test]\ncommand = "python3 test_calc.py"\n[agent]\nmax_minutes = 0.5\n'
    with TaskStore.open(f"sqlite:///{tmp_path / 'errand.db'}") as store:
        task_id = submit(store, tmp_path, toml=toml)
        async with running_engine(store, default_model="anthropic:test-model"):
            task = await wait_for_state(store, task_id, TaskState.READY_FOR_REVIEW, TaskState.FAILED, seconds=900)
        assert task.state is TaskState.FAILED
        [run] = store.runs(task_id)
        assert run.result["status"] == "budget_exhausted" and run.result["budget"] == "seconds"
        assert re.search(r"claude-code had printed nothing for \d+s, and was stopped", run.result["detail"])
        assert [request for request in wire.requests if from_the_cli(request)]  # it reached the model, mute
        assert await task_sandboxes(task_id) == []
        assert claude_processes(task_id, store) == []

