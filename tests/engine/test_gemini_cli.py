"""Gemini CLI as a task's agent: the real CLI, from the npm registry, in the task's sandbox.

As for Claude Code (test_claude_code.py): the test plays the model, here on
Gemini's API (``streamGenerateContent``, server-sent events), behind the
worker's model gateway; the CLI holds a token of its run's own as its
``GEMINI_API_KEY``, and the model's first turn looks for the key everywhere
the sandbox can read. The provider has a bad day on the way: its first answer
is a 429, which the CLI waits out and retries through the gateway.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

import pytest

from errand.errors import ConfigError
from errand.tasks.store.tasks import TaskStore
from models.wire import Answer, Json, Recorded, Stream, WireServer

from .agent_clis import (
    FAILING,
    FINAL,
    assert_audit_clean,
    assert_hung_cli_stopped,
    assert_no_key_in_transcript,
    assert_nothing_left,
    assert_reviewable_fix,
    audit,
    keyed,
    run_task,
    submit,
)
from .agent_clis import wire as wire  # the fixture: a loopback wire server the test owns

pytestmark = [pytest.mark.slow, pytest.mark.network]

KEY = "AIza-test-" + secrets.token_hex(16)
MODEL = "gemini:test-model"


@pytest.fixture
def gemini_key(monkeypatch: pytest.MonkeyPatch, wire: WireServer) -> None:
    keyed(monkeypatch, {"GEMINI_API_KEY": KEY, "GOOGLE_GEMINI_BASE_URL": wire.url},
          unset=("ERRAND_GEMINI_BASE_URL", "ERRAND_GEMINI_API_KEY"))


def shell(command: str) -> dict[str, Any]:
    return {"functionCall": {"name": "run_shell_command", "args": {"command": command}}}


TURNS: list[dict[str, Any]] = [
    shell(audit(KEY)), shell(FAILING),
    {"functionCall": {"name": "replace", "args": {"file_path": "/workspace/calc.py", "instruction": "add, not subtract",
                                                  "old_string": "return a - b", "new_string": "return a + b"}}},
    shell(FAILING), {"text": FINAL}]
QUOTA = {"error": {"code": 429, "message": "Resource has been exhausted (e.g. check quota).",
                   "status": "RESOURCE_EXHAUSTED"}}


class Model:
    """The model's turns on Gemini's wire, each streamed in two chunks with its usage; the first call is
    refused for quota, any call past the script (a side call) gets the last turn again."""

    def __init__(self) -> None:
        self.usages: list[dict[str, Any]] = []
        self.problems: list[str] = []
        self.refused = 0

    def __call__(self, request: Recorded) -> Answer:
        if request.headers.get("x-goog-api-key") != KEY or "errand-gw-" in json.dumps(request.headers):
            self.problems.append(f"not the worker's key on {request.path}: {sorted(request.headers)}")
        if not self.refused:
            self.refused += 1
            return Json(QUOTA, 429, {"Retry-After": "1"})
        turn = TURNS[min(len(self.usages), len(TURNS) - 1)]
        usage = {"promptTokenCount": 900 + 100 * len(self.usages), "candidatesTokenCount": 30,
                 "totalTokenCount": 930 + 100 * len(self.usages)}
        self.usages.append(usage)
        done = {"candidates": [{"content": {"role": "model", "parts": [turn]}, "finishReason": "STOP", "index": 0}],
                "usageMetadata": usage, "modelVersion": "test-model"}
        if ":streamGenerateContent" not in request.path:
            return Json(done)
        start = {"candidates": [{"content": {"role": "model", "parts": [{"text": ""}]}, "index": 0}],
                 "usageMetadata": {"promptTokenCount": usage["promptTokenCount"], "candidatesTokenCount": 0}}
        return Stream([(None, start), (None, done)])


def function_outputs(requests: list[Recorded]) -> list[str]:
    """Every shell command's output the CLI sent back to the model, in order, each once."""
    found: list[str] = []
    for request in requests:
        for content in (request.body or {}).get("contents", []):
            for part in content.get("parts", []):
                response = part.get("functionResponse") if isinstance(part, dict) else None
                if response and response.get("name") == "run_shell_command":
                    output = json.dumps(response.get("response"))
                    if output not in found:
                        found.append(output)
    return [json.loads(output).get("output", "") for output in found]


async def test_gemini_cli_fixes_a_failing_test_through_a_429_and_never_holds_the_key(
        gemini_key: None, wire: WireServer, tmp_path: Path) -> None:
    model = Model()
    wire.respond(model)
    with TaskStore.open(f"sqlite:///{tmp_path / 'errand.db'}") as store:
        task_id, state, run = await run_task(store, tmp_path, model=MODEL, agent="gemini-cli")
        assert_reviewable_fix(store, task_id, state, run, "gemini-cli")
        outcome = run.outcome
        assert outcome is not None
        events = store.events(task_id, 0, 100_000)
        calls = [(e.data["name"], e.data["arguments"]) for e in events if e.kind == "tool_call"]
        assert [args["command"] for name, args in calls if name == "shell"][1:] == [FAILING, FAILING]
        assert ("edit_file", {"path": "calc.py", "old": "return a - b", "new": "return a + b"}) in calls
        # The tests' first run failed, and the evidence says so with its exit code, though Gemini CLI's stream
        # marks the command's tool call a success (it ran); the audit and the second run exited 0.
        assert outcome.evidence["failed_commands"] == [{"command": FAILING, "exit_code": 1}]
        results = [(e.data["ok"], e.data["exit_code"]) for e in events if e.kind == "tool_result"]
        assert results == [(True, 0), (False, 1), (True, None), (True, 0)]
        # The 429 reached the CLI in Gemini's own shape, and it went on; every token the provider served
        # was metered by the gateway (streamed, from usageMetadata), and nothing for the refusal.
        assert model.refused == 1 and len(model.usages) >= len(TURNS)
        assert outcome.spent["tokens"] == sum(u["totalTokenCount"] for u in model.usages)
        assert model.problems == []
        assert_audit_clean(function_outputs(wire.requests)[0], KEY, "GEMINI_API_KEY=errand-gw-")
        assert_no_key_in_transcript(run, KEY, ":streamGenerateContent")
        await assert_nothing_left(store, task_id)


@pytest.mark.faults
async def test_a_hung_gemini_cli_is_stopped_at_the_time_budget(gemini_key: None, wire: WireServer,
                                                               tmp_path: Path) -> None:
    with TaskStore.open(f"sqlite:///{tmp_path / 'errand.db'}") as store:
        requests = await assert_hung_cli_stopped(store, tmp_path, wire, model=MODEL, agent="gemini-cli")
    assert [request for request in requests if ":streamGenerateContent" in request.path]


def test_errand_s_own_agent_is_refused_a_gemini_model_at_submission_and_nothing_is_queued(
        gemini_key: None, tmp_path: Path) -> None:
    with TaskStore.open(f"sqlite:///{tmp_path / 'errand.db'}") as store:
        with pytest.raises(ConfigError, match="--agent gemini-cli") as refused:
            submit(store, tmp_path, model=MODEL, agent="errand")
        assert refused.value.code == "model_mismatch"
        assert store.list_tasks() == []
