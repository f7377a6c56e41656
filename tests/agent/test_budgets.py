"""A run's budgets, checked when they are made, and what it has spent held against them."""

from __future__ import annotations

from typing import Any

import pytest

from errand.agent.budgets import Budgets, Spent
from errand.agent.exits import BudgetExhausted
from errand.errors import ConfigError
from errand.models import Usage


@pytest.mark.parametrize("options", [
    {"max_steps": 0}, {"max_steps": True}, {"max_steps": 2.0}, {"max_tokens": -5}, {"max_tokens": "100"},
    {"max_cost": 0}, {"max_cost": float("nan")}, {"max_cost": float("inf")}, {"max_cost": True},
    {"max_seconds": -1.0}, {"max_repeats": 1}, {"max_repeats": False}, {"max_malformed": 0}, {"max_malformed": 2.5},
])
def test_a_budget_that_makes_no_sense_is_refused_naming_it(options: dict[str, Any]) -> None:
    with pytest.raises(ConfigError) as caught:
        Budgets(**options)
    assert caught.value.code == "invalid_budget" and next(iter(options)) in caught.value.message


def test_none_is_no_limit() -> None:
    spent = Spent(steps=10**6, tokens=10**9, cost=10**6, seconds=10**6)
    spent.check(Budgets(max_steps=None))


def test_calls_add_up_their_tokens_and_cost_and_unpriced_calls_are_counted_apart() -> None:
    spent = Spent()
    spent.add(Usage(input_tokens=1000, output_tokens=200, cache_read_tokens=600, cache_write_tokens=100), 0.01)
    spent.add(Usage(input_tokens=50, output_tokens=5), None)
    assert (spent.tokens, spent.input_tokens, spent.output_tokens) == (1255, 1050, 205)
    assert (spent.cache_read_tokens, spent.cache_write_tokens) == (600, 100)
    assert spent.cost == pytest.approx(0.01) and spent.unpriced_calls == 1
    assert spent.steps == 0  # a step is counted by the loop, not by a model call


@pytest.mark.parametrize(("spent", "budgets", "budget", "said"), [
    (Spent(steps=5), Budgets(max_steps=5), "steps", "step budget used up (5 of 5 steps)"),
    (Spent(tokens=2000), Budgets(max_tokens=2000), "tokens", "token budget used up (2000 of 2000)"),
    (Spent(cost=1.5), Budgets(max_cost=1.5), "cost", "cost budget used up ($1.5000 of $1.5000)"),
    (Spent(seconds=61.04), Budgets(max_seconds=60), "seconds", "time budget used up (61.0s of 60s)"),
])
def test_a_budget_reached_ends_the_run_naming_it(spent: Spent, budgets: Budgets, budget: str, said: str) -> None:
    with pytest.raises(BudgetExhausted) as caught:
        spent.check(budgets)
    assert caught.value.budget == budget and caught.value.detail == said
    assert caught.value.status == "budget_exhausted"


def test_one_below_each_budget_goes_on() -> None:
    Spent(steps=4, tokens=1999, cost=1.49, seconds=59.9).check(
        Budgets(max_steps=5, max_tokens=2000, max_cost=1.5, max_seconds=60))


def test_a_call_outside_the_loop_is_refused_when_it_would_break_a_budget() -> None:
    spent = Spent(tokens=9000, cost=0.09)  # $0.00001 a token so far
    assert spent.refusal(Budgets(max_tokens=10_000), 1000) is None
    assert spent.refusal(Budgets(max_tokens=10_000), 1001) == (
        "it would take about 1001 tokens, and the run has 1000 of its 10000 left", "tokens")
    assert spent.refusal(Budgets(max_cost=0.1), 1000) is None
    reason, budget = spent.refusal(Budgets(max_cost=0.1), 1001) or ("", "")
    assert budget == "cost" and reason.startswith("it would cost about $0.0100, and the run has $0.0100")
    assert Spent(cost=0.2).refusal(Budgets(max_cost=0.1), 1) == (
        "it would cost about $0.0000, and the run has $0.0000 of its $0.1000 left", "cost")


def test_the_json_of_what_was_spent_rounds_only_the_seconds() -> None:
    saved = Spent(steps=2, tokens=30, cost=0.123456789, seconds=1.23456789, retries=1).to_json()
    assert saved["seconds"] == 1.235 and saved["cost"] == 0.123456789
    assert Spent(**saved) == Spent(steps=2, tokens=30, cost=0.123456789, seconds=1.235, retries=1)
