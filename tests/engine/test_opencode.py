"""OpenCode as a task's agent: the real CLI, from the npm registry, in the task's sandbox.

As for Claude Code (test_claude_code.py): the test plays the model, here on the
OpenAI chat completions wire (streamed), behind the worker's model gateway;
OpenCode holds a token of its run's own, and the model's first turn looks for
the key everywhere the sandbox can read. The provider has a bad day on the way:
its first answer to the agent is a 429, which OpenCode waits out and retries.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import pytest

from errand.tasks.store.tasks import TaskStore
from models.provider_wire import Provider, Turn, openai_rate_limit
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
    keyed,
    run_task,
)
from .agent_clis import wire as wire  # the fixture: a loopback wire server the test owns

pytestmark = [pytest.mark.slow, pytest.mark.network]

KEY = "sk-proj-test-" + secrets.token_hex(16)
MODEL = "openai:test-model"
SCRIPT = [
    Turn("", [("call_1", "bash", {"command": audit(KEY), "description": "audit"})]),
    Turn("", [("call_2", "bash", {"command": FAILING, "description": "run the tests"})]),
    Turn("", [("call_3", "read", {"filePath": "/workspace/calc.py"})]),
    Turn("add() subtracts.", [("call_4", "edit", {"filePath": "/workspace/calc.py", "oldString": "return a - b",
                                                  "newString": "return a + b"})]),
    Turn("", [("call_5", "bash", {"command": FAILING, "description": "run the tests again"})]),
    Turn(FINAL),
]


@pytest.fixture
def openai_key(monkeypatch: pytest.MonkeyPatch, wire: WireServer) -> None:
    keyed(monkeypatch, {"OPENAI_API_KEY": KEY, "OPENAI_BASE_URL": wire.url + "/v1"},
          unset=("ERRAND_OPENAI_BASE_URL", "ERRAND_OPENAI_API_KEY"))


def from_the_cli(request: Recorded) -> bool:
    """A request OpenCode made, not errand's own distilling on the host (its Python SDK)."""
    return "OpenAI/Python" not in request.headers.get("user-agent", "")


def tool_outputs(requests: list[Recorded]) -> dict[str, str]:
    """Every tool result OpenCode sent back to the model, by its call's id."""
    found: dict[str, str] = {}
    for request in requests:
        for message in (request.body or {}).get("messages", []):
            if message.get("role") == "tool":
                content = message.get("content")
                found[str(message.get("tool_call_id"))] = content if isinstance(content, str) else json.dumps(content)
    return found


async def test_opencode_fixes_a_failing_test_through_a_429_and_never_holds_the_key(
        openai_key: None, wire: WireServer, tmp_path: Path) -> None:
    def check(request: Recorded) -> str | None:
        if request.headers.get("authorization") != f"Bearer {KEY}" or "errand-gw-" in json.dumps(request.headers):
            return f"not the worker's key on {request.path}: {sorted(request.headers)}"
        return None

    provider = Provider("openai", lambda step: SCRIPT[min(step, len(SCRIPT)) - 1], streaming=True, check=check)
    model = CliModel(provider, from_the_cli, refuse_first=openai_rate_limit("1"))
    wire.respond(model)
    with TaskStore.open(f"sqlite:///{tmp_path / 'errand.db'}") as store:
        task_id, state, run = await run_task(store, tmp_path, model=MODEL, agent="opencode")
        assert_reviewable_fix(store, task_id, state, run, "opencode")
        outcome = run.outcome
        assert outcome is not None
        assert outcome.evidence["failed_commands"] == [{"command": FAILING, "exit_code": 1}]
        events = store.events(task_id, 0, 100_000)
        calls = [(e.data["name"], e.data["arguments"]) for e in events if e.kind == "tool_call"]
        assert ("read_file", {"path": "calc.py"}) in calls
        assert ("edit_file", {"path": "calc.py", "old": "return a - b", "new": "return a + b"}) in calls
        assert [args["command"] for name, args in calls if name == "shell"][1:] == [FAILING, FAILING]
        # The steps are the model calls of its stream (its title call is none); the tokens are every call's the
        # provider served, as the gateway metered them.
        assert outcome.spent["steps"] == len(SCRIPT)
        assert outcome.spent["tokens"] == sum(u["total_tokens"] for u in model.usages)
        assert len(model.refused) == 1 and provider.problems == []
        assert_audit_clean(tool_outputs(wire.requests)["call_1"], KEY, "ERRAND_MODEL_TOKEN=errand-gw-")
        assert_no_key_in_transcript(run, KEY, "/chat/completions")
        await assert_nothing_left(store, task_id)


@pytest.mark.faults
async def test_a_hung_opencode_is_stopped_at_the_time_budget(openai_key: None, wire: WireServer,
                                                             tmp_path: Path) -> None:
    with TaskStore.open(f"sqlite:///{tmp_path / 'errand.db'}") as store:
        requests = await assert_hung_cli_stopped(store, tmp_path, wire, model=MODEL, agent="opencode")
    assert [request for request in requests if request.path.endswith("/chat/completions")]
