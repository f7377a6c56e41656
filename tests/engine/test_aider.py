"""aider as a task's agent: the real aider, from the Python registry, in the task's sandbox.

As for the other CLIs (test_claude_code.py, test_mini_swe_agent.py): the test plays
the model on the OpenAI chat completions wire (streamed), behind the worker's model
gateway; aider holds a token of its run's own. aider has no tools, so it cannot
run the audit itself: while its first model call waits, the test runs the audit
in its sandbox, which looks for the key everywhere the sandbox can read, aider's
own process included. The model answers as aider asks, with SEARCH/REPLACE
blocks: first it names the file it must edit (aider adds it to the chat), then a
block that does not match (aider says so and asks again), then the fix. The
provider has a bad day on the way: its first answer is a 429, which aider waits
out and retries.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import threading
from pathlib import Path

import pytest

from errand.agent.aider import PRICES, SEEDED
from errand.sandbox import AsyncSandbox
from errand.tasks.lifecycle import TaskState
from errand.tasks.store.tasks import TaskStore
from models.provider_wire import Turn as Said
from models.provider_wire import openai_chunks, openai_rate_limit, openai_usage
from models.wire import Answer, Json, Recorded, Stream, WireServer

from .agent_clis import (
    FINAL,
    assert_audit_clean,
    assert_hung_cli_stopped,
    assert_no_key_in_transcript,
    assert_nothing_left,
    assert_reviewable_fix,
    audit,
    keyed,
    submit,
)
from .agent_clis import wire as wire  # the fixture: a loopback wire server the test owns
from .harness import running_engine, wait_for_state

pytestmark = [pytest.mark.slow, pytest.mark.network]

KEY = "sk-proj-test-" + secrets.token_hex(16)
MODEL = "openai:test-model"


def block(old: str, new: str) -> str:
    return f"calc.py\n```python\n<<<<<<< SEARCH\n{old}\n=======\n{new}\n>>>>>>> REPLACE\n```\n"


REPLIES = ["add() in calc.py subtracts where it should add: please add calc.py to the chat.",
           "add() subtracts.\n\n" + block("    return a * b", "    return a + b"),
           block("    return a - b", "    return a + b") + "\n" + FINAL]


@pytest.fixture
def openai_key(monkeypatch: pytest.MonkeyPatch, wire: WireServer) -> None:
    keyed(monkeypatch, {"OPENAI_API_KEY": KEY, "OPENAI_BASE_URL": wire.url + "/v1"},
          unset=("ERRAND_OPENAI_BASE_URL", "ERRAND_OPENAI_API_KEY"))


def from_aider(request: Recorded) -> bool:
    """A request of aider's (its system prompt teaches SEARCH/REPLACE), not errand's own distilling."""
    messages = (request.body or {}).get("messages") or [{}]
    return "SEARCH/REPLACE" in str(messages[0].get("content"))


class AiderModel:
    """The wire server's responder: a 429 first, then the replies in order, the first held until the
    test has audited the sandbox (so aider is surely running while it does)."""

    def __init__(self) -> None:
        self.audited = threading.Event()
        self.asked = threading.Event()
        self.usages: list[dict[str, int]] = []
        self.refused = 0
        self.problems: list[str] = []

    def __call__(self, request: Recorded) -> Answer:
        if not from_aider(request):
            return Stream(openai_chunks(Said("Notes: nothing to remember."), openai_usage(100, 10)))
        if request.headers.get("authorization") != f"Bearer {KEY}" or "errand-gw-" in json.dumps(request.headers):
            self.problems.append(f"not the worker's key on {request.path}: {sorted(request.headers)}")
        if not self.refused:
            self.refused += 1
            return openai_rate_limit("1")
        self.asked.set()
        self.audited.wait(300)
        reply = REPLIES[min(len(self.usages), len(REPLIES) - 1)]
        usage = openai_usage(len(json.dumps(request.body)) // 4, 30 + len(self.usages))
        self.usages.append(usage)
        return Stream(openai_chunks(Said(reply), usage))


async def audit_while_it_asks(model: AiderModel) -> tuple[str, str]:
    """The audit, run in the agent's sandbox while aider waits on its first reply (its layer may take
    many minutes to build first), and aider's price table's cache as aider left it at its start."""
    try:
        assert await asyncio.to_thread(model.asked.wait, 1800), "aider never asked its model"
        [info] = [i for i in await AsyncSandbox.list() if i.labels.get("role") == "agent"]
        sandbox = await AsyncSandbox.from_id(info.id)
        try:
            found = await (await sandbox.exec("sh", "-c", audit(KEY), cwd="/workspace")).result()
            prices = await (await sandbox.exec("cat", PRICES)).result()
            return found.stdout, prices.stdout
        finally:
            await sandbox.close()
    finally:
        model.audited.set()


async def test_aider_fixes_a_failing_test_through_a_429_and_never_holds_the_key(
        openai_key: None, wire: WireServer, tmp_path: Path) -> None:
    model = AiderModel()
    wire.respond(model)
    with TaskStore.open(f"sqlite:///{tmp_path / 'errand.db'}") as store:
        task_id = submit(store, tmp_path, model=MODEL, agent="aider")
        auditing = asyncio.ensure_future(audit_while_it_asks(model))
        async with running_engine(store, default_model=MODEL):
            task = await wait_for_state(store, task_id, TaskState.READY_FOR_REVIEW, TaskState.FAILED, seconds=1800)
        audit_output, prices = await auditing
        [run] = store.runs(task_id)
        # The diff is calc.py's fix alone: no .aider* file, no .gitignore line, no commit of aider's.
        assert_reviewable_fix(store, task_id, task.state, run, "aider")
        outcome = run.outcome
        assert outcome is not None
        events = store.events(task_id, 0, 100_000)
        # Each reply is a step; its SEARCH/REPLACE blocks are edits, and aider said how each went.
        edits = [(e.data["arguments"]["old"], e.data["arguments"]["path"]) for e in events if e.kind == "tool_call"]
        assert edits == [("    return a * b", "calc.py"), ("    return a - b", "calc.py")]
        results = [(e.data["ok"], e.data["content"].splitlines()[0]) for e in events if e.kind == "tool_result"]
        assert results == [(False, "# 1 SEARCH/REPLACE block failed to match!"), (True, "Applied edit to calc.py")]
        assert outcome.spent["steps"] == len(REPLIES) == len(model.usages)
        # Its tokens are the gateway's: every call the provider served to aider.
        assert outcome.spent["tokens"] == sum(u["total_tokens"] for u in model.usages)
        assert model.refused == 1 and model.problems == []
        # It fetched nothing but its model: its price table's cache is errand's seed (a fetch, which fails
        # here, leaves "{}"), and the egress proxy refused it nothing (no update check, no lookup).
        assert json.loads(prices) == SEEDED
        egress = [e.data for e in events if e.kind == "egress" and e.data.get("role") == "agent"]
        assert all(not data.get("refused") for data in egress), egress
        assert_audit_clean(audit_output, KEY, "OPENAI_API_KEY=errand-gw-")
        assert_no_key_in_transcript(run, KEY, "/chat/completions")
        await assert_nothing_left(store, task_id)


@pytest.mark.faults
async def test_a_hung_aider_is_stopped_at_the_time_budget(openai_key: None, wire: WireServer,
                                                          tmp_path: Path) -> None:
    # aider takes long to start on a loaded machine (its imports, its repo map): a budget of three minutes
    # leaves it time to ask the model, which never answers.
    with TaskStore.open(f"sqlite:///{tmp_path / 'errand.db'}") as store:
        requests = await assert_hung_cli_stopped(store, tmp_path, wire, model=MODEL, agent="aider", minutes=3)
    assert [request for request in requests if request.path.endswith("/chat/completions") and from_aider(request)]


@pytest.mark.faults
async def test_aider_refused_by_the_provider_ends_its_run_with_aiders_own_words(
        openai_key: None, wire: WireServer, tmp_path: Path) -> None:
    """aider exits 0 when its model refuses it: errand reads the error it reported after its last reply
    (here it had none) as the run's end, and says it."""
    refusal = Json({"error": {"message": "Incorrect API key provided: sk-proj-***", "type": "invalid_request_error",
                              "param": None, "code": "invalid_api_key"}}, 401)
    wire.respond(lambda request: refusal if from_aider(request) else
                 Stream(openai_chunks(Said("Notes: nothing."), openai_usage(100, 10))))
    with TaskStore.open(f"sqlite:///{tmp_path / 'errand.db'}") as store:
        task_id = submit(store, tmp_path, model=MODEL, agent="aider")
        async with running_engine(store, default_model=MODEL):
            task = await wait_for_state(store, task_id, TaskState.READY_FOR_REVIEW, TaskState.FAILED, seconds=1800)
        assert task.state is TaskState.FAILED
        [run] = store.runs(task_id)
        assert run.result["status"] == "error", run.result
        assert run.result["detail"].startswith("aider ended in error: ") and "AuthenticationError" in \
            run.result["detail"] and "Incorrect API key provided" in run.result["detail"], run.result
        assert [e for e in store.events(task_id, 0, 100_000) if e.kind == "model"] == []
        await assert_nothing_left(store, task_id)
