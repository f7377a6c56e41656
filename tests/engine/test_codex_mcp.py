"""errand's ask_person for Codex, over MCP: the real CLI asks, the task waits, the answer resumes
its session (``codex exec resume``), and the run ends as a reviewable diff.

The model is played on the OpenAI Responses wire (as in test_codex.py); it calls
errand's ``ask_person`` in the namespace Codex offers an MCP server's tools in
(``mcp__errand``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from errand.tasks.lifecycle import TaskState
from errand.tasks.service import TaskService
from errand.tasks.store.tasks import TaskStore
from models.wire import Answer, Json, Recorded, WireServer

from .agent_clis import FAILING, cli_processes, submit, task_sandboxes
from .agent_clis import wire as wire  # the fixture: a loopback wire server the test owns
from .harness import running_engine, wait_for_event, wait_for_state
from .test_claude_code_mcp import ANSWER, QUESTION
from .test_codex import command, keyed, outputs, responses_stream

pytestmark = [pytest.mark.slow, pytest.mark.network]
__all__ = ["keyed"]

SUMMARY = "add() subtracted; now it adds."


def message(n: int, text: str) -> dict[str, Any]:
    return {"type": "message", "id": f"msg_{n}", "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}


class Model:
    """Asks the person through errand's tool, ends its turn, then makes the fix once the answer is in."""

    def __init__(self) -> None:
        self.turn = 0

    def __call__(self, request: Recorded) -> Answer:
        if request.path != "/v1/responses":
            return Json({"error": {"message": "not served here", "type": "invalid_request_error"}}, 400)
        # Codex offers an MCP server's tools in a namespace of the Responses API: mcp__<server>.
        namespaces = {str(t.get("name")): [str(f.get("name")) for f in t.get("tools") or []]
                      for t in request.body.get("tools") or [] if isinstance(t, dict) and t.get("type") == "namespace"}
        self.turn += 1
        usage = {"input_tokens": 900, "output_tokens": 30, "total_tokens": 930,
                 "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}}
        if self.turn == 1:
            if "ask_person" not in namespaces.get("mcp__errand", []):
                return responses_stream(message(1, f"errand's tools are not offered ({namespaces})"), usage)
            return responses_stream({"type": "function_call", "id": "fc_1", "call_id": "call_1",
                                     "namespace": "mcp__errand", "name": "ask_person",
                                     "arguments": json.dumps({"question": QUESTION}), "status": "completed"}, usage)
        script = [message(2, "I have asked; waiting for the answer."),
                  command(3, "sed -i 's/return a - b/return a + b/' calc.py"), command(4, FAILING),
                  message(5, f"{SUMMARY}\n\nAssumptions:\n- none")]
        return responses_stream(script[min(self.turn - 2, len(script) - 1)], usage)


async def test_codex_asks_the_person_over_errands_mcp_server_and_the_answer_resumes_its_session(
        keyed: None, wire: WireServer, tmp_path: Path, engine_kind: str) -> None:
    model = Model()
    wire.respond(model)
    with TaskStore.open(f"sqlite:///{tmp_path / 'errand.db'}") as store:
        task_id = submit(store, tmp_path, model="openai:test-model", agent="codex")
        async with running_engine(store, default_model="openai:test-model", kind=engine_kind):
            task = await wait_for_state(store, task_id, TaskState.NEEDS_INPUT, TaskState.FAILED,
                                        TaskState.READY_FOR_REVIEW, seconds=900)
            assert task.state is TaskState.NEEDS_INPUT, [r.result for r in store.runs(task_id)]
            question = await wait_for_event(store, task_id, lambda e: e.kind == "question")
            assert question.data["text"] == QUESTION
            TaskService(store).answer(task_id, ANSWER)
            task = await wait_for_state(store, task_id, TaskState.READY_FOR_REVIEW, TaskState.FAILED, seconds=900)
        events = store.events(task_id, 0, 100_000)
        assert task.state is TaskState.READY_FOR_REVIEW, [(e.kind, e.data) for e in events][-10:]
        [run] = store.runs(task_id)
        assert run.outcome is not None and run.outcome.summary == SUMMARY
        assert "+    return a + b" in run.outcome.patch
        # Each item the model asked for is a step, in the resumed session too (Codex numbers them afresh).
        assert run.outcome.spent["steps"] == 5
        # The tool's call is in the log as Claude Code's would be, and its answer went back to the model.
        calls = [e.data for e in events if e.kind == "tool_call"]
        assert (calls[0]["name"], calls[0]["arguments"]) == ("mcp__errand__ask_person", {"question": QUESTION})
        assert "with the person" in outputs(wire.requests)["call_1"]
        # The answer went to the same session: the request after it holds the question's call too.
        resumed = [r for r in wire.requests if ANSWER in json.dumps(r.body)]
        assert resumed and "call_1" in json.dumps(resumed[0].body["input"])
        assert await task_sandboxes(task_id) == []
        assert cli_processes(task_id, store) == []
