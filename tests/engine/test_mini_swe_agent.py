"""mini-swe-agent as a task's agent: the real agent, from the Python registry, in the task's sandbox.

As for Claude Code (test_claude_code.py): the test plays the model, here on the
OpenAI chat completions wire (not streamed: mini-swe-agent asks whole replies),
behind the worker's model gateway; mini-swe-agent holds a token of its run's own
as litellm's ``OPENAI_API_KEY``, and the model's first turn looks for the key
everywhere the sandbox can read. The provider has a bad day on the way: its
first answer is a 429, which litellm waits out and retries.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import pytest

from errand.agent.mini_swe_agent import SUBMIT
from errand.tasks.lifecycle import TaskState
from errand.tasks.store.tasks import TaskStore
from models.provider_wire import Provider, Turn, openai_rate_limit
from models.wire import Hang, Recorded, WireServer

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
    submit,
)
from .agent_clis import wire as wire  # the fixture: a loopback wire server the test owns
from .harness import running_engine, wait_for_event, wait_for_state

pytestmark = [pytest.mark.slow, pytest.mark.network]

KEY = "sk-proj-test-" + secrets.token_hex(16)
MODEL = "openai:test-model"
FIX = "sed -i 's/return a - b/return a + b/' calc.py"
SCRIPT = [Turn("", [("call_1", "bash", {"command": audit(KEY)})]), Turn("", [("call_2", "bash", {"command": FAILING})]),
          Turn("add() subtracts.", [("call_3", "bash", {"command": FIX})]),
          Turn("", [("call_4", "bash", {"command": FAILING})]),
          Turn(FINAL, [("call_5", "bash", {"command": f"echo {SUBMIT}"})])]


@pytest.fixture
def openai_key(monkeypatch: pytest.MonkeyPatch, wire: WireServer) -> None:
    keyed(monkeypatch, {"OPENAI_API_KEY": KEY, "OPENAI_BASE_URL": wire.url + "/v1"},
          unset=("ERRAND_OPENAI_BASE_URL", "ERRAND_OPENAI_API_KEY"))


def from_the_cli(request: Recorded) -> bool:
    """A request of mini-swe-agent's (its one tool is bash), not errand's own distilling on the host."""
    tools = (request.body or {}).get("tools") or []
    return [tool.get("function", {}).get("name") for tool in tools] == ["bash"]


async def test_mini_swe_agent_fixes_a_failing_test_through_a_429_and_never_holds_the_key(
        openai_key: None, wire: WireServer, tmp_path: Path) -> None:
    def check(request: Recorded) -> str | None:
        if request.headers.get("authorization") != f"Bearer {KEY}" or "errand-gw-" in json.dumps(request.headers):
            return f"not the worker's key on {request.path}: {sorted(request.headers)}"
        return None

    provider = Provider("openai", lambda step: SCRIPT[min(step, len(SCRIPT)) - 1], check=check)
    model = CliModel(provider, from_the_cli, refuse_first=openai_rate_limit("1"))
    wire.respond(model)
    with TaskStore.open(f"sqlite:///{tmp_path / 'errand.db'}") as store:
        task_id, state, run = await run_task(store, tmp_path, model=MODEL, agent="mini-swe-agent")
        assert_reviewable_fix(store, task_id, state, run, "mini-swe-agent")
        outcome = run.outcome
        assert outcome is not None
        # Its submit command is no command of the work; the tests' first run failed, as the evidence says.
        assert outcome.evidence["failed_commands"] == [{"command": FAILING, "exit_code": 1}]
        events = store.events(task_id, 0, 100_000)
        shell = [e.data["arguments"]["command"] for e in events if e.kind == "tool_call"]
        assert shell[1:] == [FAILING, FIX, FAILING]
        assert outcome.spent["steps"] == len(SCRIPT)
        assert outcome.spent["tokens"] == sum(u["total_tokens"] for u in model.usages)
        assert len(model.refused) == 1 and provider.problems == []
        # The model is shown a long output cut in two; errand's log keeps it whole.
        [audit_output] = [e.data["content"] for e in events if e.kind == "tool_result" and e.data["id"] == "call_1"]
        assert_audit_clean(audit_output, KEY, "OPENAI_API_KEY=errand-gw-")
        assert_no_key_in_transcript(run, KEY, "/chat/completions")
        await assert_nothing_left(store, task_id)


@pytest.mark.faults
async def test_a_hung_mini_swe_agent_is_stopped_at_the_time_budget(openai_key: None, wire: WireServer,
                                                                   tmp_path: Path) -> None:
    with TaskStore.open(f"sqlite:///{tmp_path / 'errand.db'}") as store:
        requests = await assert_hung_cli_stopped(store, tmp_path, wire, model=MODEL, agent="mini-swe-agent")
    assert [request for request in requests if request.path.endswith("/chat/completions")]


#: The silence limit these tests give the worker (``ERRAND_CLI_QUIET_SECONDS``), shortened from ten minutes
#: (still above mini-swe-agent's start and first step on a loaded machine).
QUIET = 90
#: Each step of the long run is this long: shorter than the limit (and mini-swe-agent's 30 s command
#: timeout), and together far longer (each a different command: the same one thrice is stuck).
PAUSE = "sleep 25"
#: Seconds a test waits for its task: mini-swe-agent's layer (litellm and all, ~730 MB) is built first.
INSTALL_AND_RUN = 1800


@pytest.mark.faults
async def test_a_mini_swe_agent_run_longer_than_the_silence_limit_is_live_while_it_takes_steps(
        openai_key: None, wire: WireServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ERRAND_CLI_QUIET_SECONDS", str(QUIET))
    script = [Turn("", [("call_1", "bash", {"command": FAILING})]),
              *(Turn("", [(f"call_{n}", "bash", {"command": f"{PAUSE}; echo pause {n}"})]) for n in range(2, 7)),
              Turn("add() subtracts.", [("call_7", "bash", {"command": FIX})]),
              Turn("", [("call_8", "bash", {"command": FAILING})]),
              Turn(FINAL, [("call_9", "bash", {"command": f"echo {SUBMIT}"})])]
    wire.respond(CliModel(Provider("openai", lambda step: script[min(step, len(script)) - 1]), from_the_cli))
    with TaskStore.open(f"sqlite:///{tmp_path / 'errand.db'}") as store:
        task_id = submit(store, tmp_path, model=MODEL, agent="mini-swe-agent")
        async with running_engine(store, default_model=MODEL):
            # Its steps reach the log while it runs: the first long pause is logged before it ends.
            seen = await wait_for_event(store, task_id, lambda e: e.kind == "exit" or (
                e.kind == "tool_call" and e.data["id"] == "call_2"), seconds=INSTALL_AND_RUN)
            assert seen.kind == "tool_call", seen.data  # not the run's end (taken for hung, before the watcher)
            assert store.get_task(task_id).state is TaskState.RUNNING
            task = await wait_for_state(store, task_id, TaskState.READY_FOR_REVIEW, TaskState.FAILED,
                                        seconds=INSTALL_AND_RUN)
        [run] = store.runs(task_id)
        assert_reviewable_fix(store, task_id, task.state, run, "mini-swe-agent")
        assert run.outcome is not None and run.outcome.spent["seconds"] > QUIET  # longer than the limit, yet live
        await assert_nothing_left(store, task_id)


@pytest.mark.faults
async def test_a_mini_swe_agent_whose_trajectory_stops_growing_is_taken_for_hung(
        openai_key: None, wire: WireServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ERRAND_CLI_QUIET_SECONDS", str(QUIET))
    wire.respond(lambda _request: Hang())  # the model never answers: mini-swe-agent waits, its trajectory still
    with TaskStore.open(f"sqlite:///{tmp_path / 'errand.db'}") as store:
        task_id = submit(store, tmp_path, model=MODEL, agent="mini-swe-agent")
        async with running_engine(store, default_model=MODEL):
            await wait_for_state(store, task_id, TaskState.FAILED, TaskState.READY_FOR_REVIEW, seconds=INSTALL_AND_RUN)
        [run] = store.runs(task_id)
        assert store.get_task(task_id).state is TaskState.FAILED
        assert run.result["status"] == "error", run.result
        detail = run.result["detail"]
        assert f"mini-swe-agent had printed nothing for {QUIET}s, and was stopped (taken for hung)" in detail
        await assert_nothing_left(store, task_id)
    assert [request for request in wire.requests if request.path.endswith("/chat/completions")]
