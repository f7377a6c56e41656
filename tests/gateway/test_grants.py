"""A grant's parts: an upstream that never shows its key, a budget refused when it is nonsense, and
the accounting that decides how much a call may still spend."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from errand.errors import ConfigError
from errand.gateway.grants import Budget, Call, Grant, Upstream, check_grant_id
from errand.models import Pricing, Usage

KEY = "sk-upstream-secret-3c1d"


def grant(budget: Budget, pricing: Pricing | None = None, protocol: Any = "openai-chat") -> Grant:
    return Grant("g-1", Upstream(protocol, "https://models.invalid/v1", KEY), budget, pricing, "tok",
                 "http://127.0.0.1:8123", Path("/nonexistent/g-1.jsonl"))


def call(number: int, usage: Usage | None, cost: float | None) -> Call:
    return Call(number, "POST", "/v1/chat/completions", "gpt-4.1", 0.0, status=200, usage=usage, cost=cost,
                complete=True)


def test_an_upstream_s_key_never_shows_in_its_repr_or_the_grant_s() -> None:
    upstream = Upstream("anthropic", "https://models.invalid", KEY)
    assert KEY not in repr(upstream) and "key=<redacted>" in repr(upstream)
    assert KEY not in repr(grant(Budget()))


@pytest.mark.parametrize(("protocol", "base_url", "key"), [
    ("openai", "https://models.invalid/v1", KEY),  # not a protocol: openai-chat or openai-responses
    ("openai-chat", "ftp://models.invalid/v1", KEY),
    ("openai-chat", "https:///v1", KEY),  # no host
    ("openai-chat", "https://models.invalid/v1?key=x", KEY),
    ("openai-chat", 42, KEY),
    ("openai-chat", "https://models.invalid/v1", ""),
    ("openai-chat", "https://models.invalid/v1", "sk-1\r\nX-Injected: yes"),
])
def test_a_bad_upstream_is_refused_with_invalid_config(protocol: Any, base_url: Any, key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Upstream(protocol, base_url, key)
    assert caught.value.code == "invalid_config"
    assert KEY not in caught.value.message


@pytest.mark.parametrize("budget", [{"max_tokens": -1}, {"max_tokens": True}, {"max_tokens": 1.5},
                                    {"max_cost": -0.01}, {"max_cost": float("nan")}, {"max_cost": float("inf")},
                                    {"max_cost": "1"}])
def test_a_bad_budget_is_refused(budget: dict[str, Any]) -> None:
    with pytest.raises(ConfigError) as caught:
        Budget(**budget)
    assert caught.value.code == "invalid_config"


def test_zero_is_a_budget_and_none_is_no_limit() -> None:
    assert grant(Budget(max_tokens=0)).spent() == "its token budget is spent (0 of 0 tokens)"
    assert grant(Budget()).spent() is None and grant(Budget()).output_left("gpt-4.1") is None


def test_the_base_url_ends_in_the_path_the_protocol_s_sdk_appends_to() -> None:
    assert grant(Budget()).base_url == "http://127.0.0.1:8123/v1"
    assert grant(Budget()).url_at("http://127.0.0.1:3129/") == "http://127.0.0.1:3129/v1"
    assert grant(Budget(), protocol="anthropic").url_at("http://127.0.0.1:3129") == "http://127.0.0.1:3129"


def test_spending_adds_up_over_calls_and_ends_the_budget() -> None:
    spending = grant(Budget(max_tokens=1000, max_cost=1.0))
    spending.calls += [call(1, Usage(300, 100), 0.25), call(2, None, None), call(3, Usage(400, 150), None)]
    assert spending.tokens == 950 and spending.cost == 0.25 and spending.spent() is None
    spending.calls.append(call(4, Usage(40, 10), 0.75))
    assert spending.spent() == "its token budget is spent (1,000 of 1,000 tokens)"
    by_cost = grant(Budget(max_cost=0.5))
    by_cost.calls.append(call(1, Usage(1, 1), 0.5))
    assert by_cost.spent() == "its cost budget is spent ($0.5000 of $0.5000)"


def test_output_left_is_the_tighter_budget_less_what_calls_under_way_hold() -> None:
    # $8 per million output tokens: $0.01 buys 1,250 tokens.
    held = grant(Budget(max_tokens=5000, max_cost=0.01), Pricing(input=2.0, output=8.0))
    assert held.output_left("any-model") == 1250
    dollars = held.hold(1000, "any-model")
    assert dollars == pytest.approx(0.008) and held.output_left("any-model") == 250
    held.release(1000, dollars)
    assert held.output_left("any-model") == 1250 and held.held == 0


def test_without_its_own_prices_a_grant_uses_the_table_s_and_an_unknown_model_is_unbounded_by_cost() -> None:
    table = grant(Budget(max_cost=0.008))
    assert table.price("gpt-4.1-2025-04-14") == Pricing(2.0, 8.0, cache_read=0.5, cache_write=2.0)
    assert table.output_left("gpt-4.1") == 1000
    assert table.output_left("a-model-errand-has-no-price-for") is None
    assert table.hold(500, "a-model-errand-has-no-price-for") == 0.0
    assert table.output_left("a-model-errand-has-no-price-for") is None and table.held == 500


@pytest.mark.parametrize("bad", ["", ".hidden", "a/b", "../up", "x" * 129, "ünï", 7, None])
def test_a_grant_id_that_could_not_name_its_transcript_file_is_refused(bad: object) -> None:
    with pytest.raises(ConfigError) as caught:
        check_grant_id(bad)
    assert caught.value.code == "invalid_config"


def test_a_grant_id_of_letters_digits_dots_and_dashes_is_kept() -> None:
    assert check_grant_id("task-42_r1.attempt") == "task-42_r1.attempt"
    assert check_grant_id("x" * 128) == "x" * 128
