"""Asking the model through the provider's failures: what is worth it retried after the policy's wait,
each retry an event, and the run ended with a reason when retrying cannot help."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from errand.agent.asking import Asker
from errand.agent.budgets import Spent
from errand.agent.context import Context
from errand.agent.exits import RunFailed
from errand.agent.retry import RetryPolicy
from errand.models import Message, ModelError, Reply, ScriptedModel, Tool
from errand.models.errors import CONTEXT_LENGTH_EXCEEDED

CONVERSATION = [Message("system", "You fix bugs."), Message("user", "Fix add().")]


class Flaky:
    """A model that fails with ``errors`` first, then answers from its script."""

    def __init__(self, *errors: ModelError) -> None:
        self.name = "flaky"
        self.errors = list(errors)
        self.script = ScriptedModel(["done"])
        self.asked = 0

    async def complete(self, messages: Sequence[Message], tools: Sequence[Tool]) -> Reply:
        self.asked += 1
        if self.errors:
            raise self.errors.pop(0)
        return await self.script.complete(messages, tools)


class Clock:
    def __init__(self) -> None:
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return sum(self.slept)

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)


def busy(retry_after: float | None = None) -> ModelError:
    return ModelError("overloaded", provider="p", status=529, retryable=True, retry_after=retry_after)


def asker(model: Flaky, *, left: float | None = None, **policy: Any) -> tuple[Asker, Clock, list[tuple[str, Any]],
                                                                            Spent]:
    clock, events, spent = Clock(), [], Spent()

    async def emit(kind: str, data: dict[str, Any]) -> None:
        events.append((kind, data))

    return Asker(model, Context(None), RetryPolicy(**policy), clock, emit, spent, lambda: left), clock, events, spent


async def test_a_retryable_failure_is_retried_after_the_policy_s_wait_each_retry_an_event() -> None:
    model = Flaky(busy(), busy(), busy(retry_after=30.0))
    ask, clock, events, spent = asker(model, base_delay=1.0)
    reply = await ask.ask(CONVERSATION, [])
    assert reply.message.content == "done" and model.asked == 4
    assert clock.slept == [1.0, 2.0, 30.0] and spent.retries == 3
    assert [(kind, data["retry"], data["delay"], data["status"]) for kind, data in events] == [
        ("model_retry", 1, 1.0, 529), ("model_retry", 2, 2.0, 529), ("model_retry", 3, 30.0, 529)]


async def test_a_failure_not_worth_retrying_ends_the_run_at_once() -> None:
    model = Flaky(ModelError("invalid api key", provider="p", status=401))
    ask, clock, events, _ = asker(model)
    with pytest.raises(RunFailed, match="the model failed: invalid api key"):
        await ask.ask(CONVERSATION, [])
    assert model.asked == 1 and clock.slept == [] and events == []


async def test_the_retries_are_bounded() -> None:
    model = Flaky(busy(), busy(), busy())
    ask, clock, _, spent = asker(model, max_retries=2, base_delay=0.5)
    with pytest.raises(RunFailed, match="failed 3 times in a row, the retries used up"):
        await ask.ask(CONVERSATION, [])
    assert model.asked == 3 and clock.slept == [0.5, 1.0] and spent.retries == 2


async def test_a_wait_past_the_time_left_is_not_begun() -> None:
    model = Flaky(busy(retry_after=10.0))
    ask, clock, events, spent = asker(model, left=9.5)
    with pytest.raises(RunFailed, match=r"retry 1 would wait 10s, past the run's time budget \(9.5s left\)"):
        await ask.ask(CONVERSATION, [])
    assert clock.slept == [] and events == [] and spent.retries == 0


async def test_too_long_with_nothing_to_condense_ends_the_run_saying_so() -> None:
    model = Flaky(ModelError("prompt is too long", provider="p", status=400, code=CONTEXT_LENGTH_EXCEEDED,
                             context_window=2048))
    ask, _, _, spent = asker(model)
    with pytest.raises(RunFailed, match="no longer fits the model's context window and nothing more can be condensed"):
        await ask.ask(CONVERSATION, [])
    assert ask.context.window == 2048 and spent.condensations == 0
