"""Every model call a task causes is in its figures and under its budget: the agent's calls,
and the memory-distilling call made after the task is ready for review.

The real ``openai`` SDK talks to a loopback server speaking OpenAI's wire protocol that
answers with the usage it chooses and keeps its own tally; the task's reported tokens and
cost must be that tally (at the model's published price), no call left out.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from errand.agent import Budgets
from errand.models import Usage
from errand.models.profiles import KNOWN
from errand.tasks.lifecycle import TaskState
from errand.tasks.service import TaskService
from errand.tasks.store.tasks import TaskStore
from models.wire import Answer, Json, Recorded, WireServer

from .harness import FIX_SCRIPT, openai_turn, running_engine, wait_for_event, wait_for_state

MODEL = "gpt-4o-mini"  # a model errand knows the price of
PRICE = KNOWN[MODEL].pricing
DISTILL_USAGE = Usage(input_tokens=3_000, output_tokens=150)


class TallyingWire:
    """Plays the agent's script, then answers the distilling request; tallies what it billed."""

    def __init__(self, server: WireServer) -> None:
        self.server = server
        self.billed: list[tuple[str, Usage]] = []
        server.respond(self.answer)

    def answer(self, request: Recorded) -> Answer:
        tools = {tool["function"]["name"] for tool in request.body.get("tools") or []}
        if "propose_memory" in tools:
            body = openai_turn([("propose_memory", {"kind": "command", "text": "Run python3 test_calc.py"})], 99)
            usage = DISTILL_USAGE
        else:
            n = sum(1 for kind, _ in self.billed if kind == "agent")
            body = openai_turn(FIX_SCRIPT[n], n)
            usage = Usage(input_tokens=100 + 10 * n, output_tokens=20)
        body["usage"] = {"prompt_tokens": usage.input_tokens, "completion_tokens": usage.output_tokens,
                         "total_tokens": usage.input_tokens + usage.output_tokens}
        self.billed.append(("distill" if "propose_memory" in tools else "agent", usage))
        return Json(body)

    def total(self) -> tuple[int, int, float]:
        assert PRICE is not None
        return (sum(u.input_tokens for _, u in self.billed), sum(u.output_tokens for _, u in self.billed),
                sum(PRICE.cost(u) for _, u in self.billed))


@pytest.fixture
def wire(monkeypatch: pytest.MonkeyPatch) -> Iterator[TallyingWire]:
    server = WireServer().start()
    for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "ERRAND_MODEL"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(f"ERRAND_{name}", raising=False)
    monkeypatch.setenv("OPENAI_BASE_URL", f"{server.url}/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-wire")
    yield TallyingWire(server)
    server.stop()


async def _run(store: TaskStore, service: TaskService, repo: Path, budgets: Budgets,
               kind: str = "local") -> tuple[str, Any]:
    task = service.submit("Make test_calc.py pass", repo=repo, model=f"openai:{MODEL}")
    async with running_engine(store, budgets=budgets, default_model="unused:x", kind=kind):
        done = await wait_for_state(store, task.id, TaskState.READY_FOR_REVIEW, TaskState.FAILED)
        ended = await wait_for_event(store, task.id, lambda e: e.kind in (
            "memories_proposed", "distill_failed", "distill_skipped"))
    assert done.state is TaskState.READY_FOR_REVIEW, [e.data for e in store.events(task.id, kinds=["failed"])]
    return task.id, ended


@pytest.mark.faults
async def test_the_distilling_call_is_in_the_task_figures(wire: TallyingWire, store: TaskStore,
                                                          service: TaskService, repo: Path, engine_kind: str) -> None:
    task_id, ended = await _run(store, service, repo, Budgets(max_cost=1.0), engine_kind)  # room for it
    assert ended.kind == "memories_proposed", ended.data
    assert [kind for kind, _ in wire.billed] == ["agent"] * 4 + ["distill"]

    figures = service.progress(task_id)
    input_tokens, output_tokens, cost = wire.total()
    usage = figures["usage"]
    assert (usage["input_tokens"], usage["output_tokens"]) == (input_tokens, output_tokens)
    assert usage["cost"] == pytest.approx(cost, abs=1e-6) and usage["cost_known"]
    assert usage["steps"] == 4  # the agent's steps; distilling is a call, not a step
    [attempt] = figures["attempts"]  # charged to the run whose trajectory was distilled
    assert attempt["usage"]["tokens"] == input_tokens + output_tokens


@pytest.mark.faults
@pytest.mark.parametrize(("budgets", "budget"), [
    (Budgets(max_cost=0.0001), "cost"),  # the agent's four calls cost $0.000117: the budget is spent
    (Budgets(max_tokens=600), "tokens"),  # 540 of 600 tokens used: no room for the distilling call
])
async def test_a_spent_budget_stops_the_distilling_call(wire: TallyingWire, store: TaskStore,
                                                        service: TaskService, repo: Path, budgets: Budgets,
                                                        budget: str) -> None:
    task_id, ended = await _run(store, service, repo, budgets)
    assert ended.kind == "distill_skipped", ended.data
    assert ended.data["budget"] == budget and "not distilled" in ended.data["reason"]
    assert [kind for kind, _ in wire.billed] == ["agent"] * 4  # the call was never made

    input_tokens, output_tokens, cost = wire.total()
    usage = service.progress(task_id)["usage"]
    assert (usage["input_tokens"], usage["output_tokens"]) == (input_tokens, output_tokens)
    assert usage["cost"] == pytest.approx(cost, abs=1e-6)
