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
import secrets
from collections.abc import Callable
from pathlib import Path

import pytest

from errand.agent.claude_code import ClaudeCode
from errand.tasks.lifecycle import TaskState
from errand.tasks.store.tasks import TaskStore
from models.provider_wire import Provider, Turn
from models.wire import Recorded, WireServer

from .agent_clis import (
    FAILING,
    FINAL,
    CliModel,
    assert_audit_clean,
    assert_hung_cli_stopped,
    assert_no_key_in_transcript,
    assert_nothing_left,
    assert_reviewable_fix,
    audit,
    run_task,
)
from .agent_clis import wire as wire  # the fixture: a loopback wire server the test owns

pytestmark = [pytest.mark.slow, pytest.mark.network]

KEY = "sk-ant-test-" + secrets.token_hex(16)  # the worker's key: it must never reach the sandbox
MODEL = "anthropic:test-model"


@pytest.fixture
def keyed(monkeypatch: pytest.MonkeyPatch, wire: WireServer) -> None:
    """The worker's key, and the task's endpoint: the wire server, as a provider's URL would be."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", wire.url)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("ERRAND_ANTHROPIC_BASE_URL", raising=False)


def fix_turns() -> Callable[[int], Turn]:
    script = [
        Turn("Let me see what the sandbox holds.",
             [("toolu_1", "Bash", {"command": audit(KEY), "description": "audit"})]),
        Turn("", [("toolu_2", "Bash", {"command": FAILING, "description": "run the tests"})]),
        Turn("", [("toolu_3", "Read", {"file_path": "/workspace/calc.py"})]),
        Turn("add() subtracts.", [("toolu_4", "Edit", {"file_path": "/workspace/calc.py",
                                                         "old_string": "return a - b", "new_string": "return a + b"})]),
        Turn("", [("toolu_5", "Bash", {"command": FAILING, "description": "run the tests again"})]),
        Turn(FINAL),
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
    model = CliModel(provider, from_the_cli)
    wire.respond(model)
    with TaskStore.open(f"sqlite:///{tmp_path / 'errand.db'}") as store:
        task_id, state, run = await run_task(store, tmp_path, model=MODEL, agent="claude-code")
        assert_reviewable_fix(store, task_id, state, run, "claude-code")
        outcome = run.outcome
        assert outcome is not None
        assert outcome.evidence["commands_run"] == 3  # the audit and the tests twice, as errand's journal counts
        # The log reads as errand's own agent's: its tools by errand's names, each model call with its tokens.
        events = store.events(task_id, 0, 100_000)
        calls = [(e.data["name"], e.data["arguments"]) for e in events if e.kind == "tool_call"]
        assert ("read_file", {"path": "calc.py"}) in calls
        assert ("edit_file", {"path": "calc.py", "old": "return a - b", "new": "return a + b"}) in calls
        assert [args["command"] for name, args in calls if name == "shell"][1:] == [FAILING, FAILING]
        # Steps are the model calls of its stream; tokens are what the gateway metered, which is what the
        # wire server served (a call the CLI makes on the side, which its stream does not show, included).
        spent = outcome.spent
        wire_tokens = sum(u["input_tokens"] + u["cache_read_input_tokens"] + u["cache_creation_input_tokens"]
                          + u["output_tokens"] for u in model.usages)
        assert spent["steps"] == len(model.usages) == 6
        assert spent["tokens"] == wire_tokens
        # The key: not in the CLI's requests, not in any environment, command line or file in the sandbox.
        assert provider.problems == []
        assert_audit_clean(tool_results(wire.requests)["toolu_1"], KEY, "ANTHROPIC_AUTH_TOKEN=errand-gw-")
        assert_no_key_in_transcript(run, KEY, "/v1/messages")
        await assert_nothing_left(store, task_id)


@pytest.mark.faults
async def test_a_cli_that_exits_at_start_ends_its_run_with_its_reason(
        keyed: None, wire: WireServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_argv = ClaudeCode.argv
    monkeypatch.setattr(ClaudeCode, "argv", lambda self, *a: [*real_argv(self, *a), "--no-such-option"])
    wire.respond(Provider("anthropic", fix_turns(), streaming=True))
    with TaskStore.open(f"sqlite:///{tmp_path / 'errand.db'}") as store:
        task_id, state, run = await run_task(store, tmp_path, model=MODEL, agent="claude-code")
        assert state is TaskState.FAILED
        assert run.result["status"] == "error"
        assert "claude-code exited with code 1 before it gave a result" in run.result["detail"]
        assert "no-such-option" in run.result["detail"]  # what the CLI said, so a person sees why
        assert [request for request in wire.requests if from_the_cli(request)] == []
        await assert_nothing_left(store, task_id)


@pytest.mark.faults
async def test_a_cli_that_hangs_is_stopped_at_the_time_budget_and_leaves_nothing_running(
        keyed: None, wire: WireServer, tmp_path: Path) -> None:
    with TaskStore.open(f"sqlite:///{tmp_path / 'errand.db'}") as store:
        requests = await assert_hung_cli_stopped(store, tmp_path, wire, model=MODEL, agent="claude-code")
    assert [request for request in requests if from_the_cli(request)]  # it reached the model, which was mute
