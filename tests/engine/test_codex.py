"""Codex as a task's agent: the real CLI, from the npm registry, in the task's sandbox.

As for Claude Code (test_claude_code.py): the test plays the model, here on the
OpenAI Responses wire (streamed), behind the worker's model gateway; Codex
holds a token of its run's own, and the model's first turn looks for the key
everywhere the sandbox can read.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

import pytest

from errand.tasks.store.tasks import TaskStore
from models.wire import Answer, Json, Recorded, Stream, WireServer

from .agent_clis import (
    FAILING,
    FINAL,
    assert_audit_clean,
    assert_hung_cli_stopped,
    assert_nothing_left,
    assert_reviewable_fix,
    audit,
    run_task,
)
from .agent_clis import wire as wire  # the fixture: a loopback wire server the test owns

pytestmark = [pytest.mark.slow, pytest.mark.network]

KEY = "sk-proj-test-" + secrets.token_hex(16)


@pytest.fixture
def keyed(monkeypatch: pytest.MonkeyPatch, wire: WireServer) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", wire.url + "/v1")
    monkeypatch.delenv("ERRAND_OPENAI_BASE_URL", raising=False)


def _response(output: list[dict[str, Any]], usage: dict[str, Any] | None, status: str) -> dict[str, Any]:
    return {"id": "resp_1", "object": "response", "created_at": 0, "status": status, "model": "test-model",
            "output": output, "parallel_tool_calls": True, "tool_choice": "auto", "tools": [], "usage": usage}


def responses_stream(item: dict[str, Any], usage: dict[str, Any]) -> Stream:
    """One output item (a function call, or a message) as the Responses API streams it."""
    events: list[tuple[str | None, Any]] = [
        ("response.created", {"type": "response.created", "response": _response([], None, "in_progress")})]
    added = {**item, "arguments": ""} if item["type"] == "function_call" else {**item, "content": []}
    events.append(("response.output_item.added", {"type": "response.output_item.added", "output_index": 0,
                                                   "item": added}))
    if item["type"] == "message":
        events.append(("response.content_part.added", {
            "type": "response.content_part.added", "item_id": item["id"], "output_index": 0, "content_index": 0,
            "part": {"type": "output_text", "text": "", "annotations": []}}))
        events.append(("response.output_text.delta", {
            "type": "response.output_text.delta", "item_id": item["id"], "output_index": 0, "content_index": 0,
            "delta": item["content"][0]["text"], "logprobs": []}))
    else:
        events.append(("response.function_call_arguments.delta", {
            "type": "response.function_call_arguments.delta", "item_id": item["id"], "output_index": 0,
            "delta": item["arguments"]}))
    events.append(("response.output_item.done", {"type": "response.output_item.done", "output_index": 0,
                                                 "item": item}))
    events.append(("response.completed", {"type": "response.completed",
                                          "response": _response([item], usage, "completed")}))
    return Stream(events)


def command(n: int, cmd: str) -> dict[str, Any]:
    return {"type": "function_call", "id": f"fc_{n}", "call_id": f"call_{n}", "name": "exec_command",
            "arguments": json.dumps({"cmd": cmd}), "status": "completed"}


TURNS = [command(1, audit(KEY)), command(2, FAILING), command(3, "sed -i 's/return a - b/return a + b/' calc.py"),
         command(4, FAILING),
         {"type": "message", "id": "msg_5", "status": "completed", "role": "assistant", "content": [
             {"type": "output_text", "text": FINAL, "annotations": []}]}]


class Model:
    """The model's turns on the Responses wire, each reply's usage recorded; any request past the script
    (a side call) gets the last turn again."""

    def __init__(self) -> None:
        self.usages: list[dict[str, Any]] = []
        self.problems: list[str] = []

    def __call__(self, request: Recorded) -> Answer:
        if request.path != "/v1/responses":  # errand's own call, distilling memories on the host after the run
            return Json({"error": {"message": "not served here", "type": "invalid_request_error"}}, 400)
        if request.headers.get("authorization") != f"Bearer {KEY}":
            self.problems.append(f"not the worker's key: {request.headers.get('authorization')!r}")
        turn = TURNS[min(len(self.usages), len(TURNS) - 1)]
        usage = {"input_tokens": 900 + 100 * len(self.usages), "output_tokens": 30, "total_tokens": 0,
                 "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}}
        usage["total_tokens"] = usage["input_tokens"] + usage["output_tokens"]
        self.usages.append(usage)
        return responses_stream(turn, usage)


def outputs(requests: list[Recorded]) -> dict[str, str]:
    """Every command's output Codex sent back to the model, by its call's id."""
    found: dict[str, str] = {}
    for request in requests:
        for item in (request.body or {}).get("input", []):
            if isinstance(item, dict) and item.get("type") == "function_call_output":
                output = item.get("output")
                found[str(item.get("call_id"))] = output if isinstance(output, str) else json.dumps(output)
    return found


async def test_codex_fixes_a_failing_test_and_never_holds_the_key(keyed: None, wire: WireServer,
                                                                  tmp_path: Path) -> None:
    model = Model()
    wire.respond(model)
    with TaskStore.open(f"sqlite:///{tmp_path / 'errand.db'}") as store:
        task_id, state, run = await run_task(store, tmp_path, model="openai:test-model", agent="codex")
        assert_reviewable_fix(store, task_id, state, run, "codex")
        outcome = run.outcome
        assert outcome is not None
        assert outcome.evidence["commands_run"] == 4
        assert outcome.evidence["failed_commands"] == [{"command": FAILING, "exit_code": 1}]
        events = store.events(task_id, 0, 100_000)
        shell = [e.data["arguments"]["command"] for e in events if e.kind == "tool_call"]
        assert shell[1:] == [FAILING, "sed -i 's/return a - b/return a + b/' calc.py", FAILING]
        wire_tokens = sum(u["total_tokens"] for u in model.usages)
        assert outcome.spent["tokens"] == wire_tokens
        assert model.problems == []
        assert_audit_clean(outputs(wire.requests)["call_1"], KEY, "ERRAND_MODEL_TOKEN=errand-gw-")
        await assert_nothing_left(store, task_id)


@pytest.mark.faults
async def test_a_hung_codex_is_stopped_at_the_time_budget(keyed: None, wire: WireServer, tmp_path: Path) -> None:
    with TaskStore.open(f"sqlite:///{tmp_path / 'errand.db'}") as store:
        requests = await assert_hung_cli_stopped(store, tmp_path, wire, model="openai:test-model", agent="codex")
    assert [request for request in requests if request.path == "/v1/responses"]
