"""A run of an agent CLI counts what the model gateway metered for it where its stream told less."""

from __future__ import annotations

from errand.agent import AgentResult, Spent
from errand.models import Usage
from errand.tasks.round.order import metered


def result(tokens_in: int, tokens_out: int, cost: float) -> AgentResult:
    spent = Spent(steps=3, tokens=tokens_in + tokens_out, input_tokens=tokens_in, output_tokens=tokens_out, cost=cost)
    return AgentResult(status="finished", detail="done", messages=[], spent=spent, summary="done")


def test_the_gateway_saw_a_call_the_stream_did_not_show() -> None:
    counted = metered(result(1000, 60, 0.01), (Usage(1400, 80, 200, 0), 0.015))
    spent = counted.spent
    assert (spent.input_tokens, spent.output_tokens, spent.tokens, spent.steps) == (1400, 80, 1480, 3)
    assert spent.cache_read_tokens == 200 and round(spent.cost, 6) == 0.015


def test_what_the_stream_told_stands_when_the_gateway_saw_no_more() -> None:
    told = result(1000, 60, 0.01)
    assert metered(told, (Usage(1000, 60), 0.01)).spent == told.spent
    assert metered(told, None) is told
