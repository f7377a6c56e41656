"""What errand knows of a model: its window and prices, found for dated and routed names, checked
when given, and the cost of a call's tokens."""

from __future__ import annotations

from typing import Any

import pytest

from errand.errors import ConfigError
from errand.models import Usage
from errand.models.profiles import KNOWN, ModelProfile, Pricing, profile_for


def test_the_profile_table_knows_dated_names_and_not_unknown_models() -> None:
    assert profile_for("claude-sonnet-4-5-20250929").context_window == 200_000
    assert profile_for("gpt-4.1-mini-2025-04-14") == profile_for("gpt-4.1-mini") != profile_for("gpt-4.1")
    assert profile_for("openai/gpt-4o").pricing == profile_for("gpt-4o").pricing
    assert profile_for("qwen2.5-coder:7b") == ModelProfile()
    sonnet = profile_for("claude-sonnet-4-5").pricing
    assert sonnet is not None and (sonnet.cache_read, sonnet.cache_write) == pytest.approx((0.3, 3.75))


def test_the_longest_known_prefix_wins_and_a_name_is_read_whatever_its_case() -> None:
    assert profile_for("gpt-4o-mini-2024-07-18") is KNOWN["gpt-4o-mini"]
    assert profile_for("  Claude-Haiku-4-5 ") is KNOWN["claude-haiku-4-5"]
    assert profile_for("openrouter/anthropic/claude-opus-4-1") is KNOWN["claude-opus-4-1"]
    assert profile_for("gpt-4.10") == ModelProfile()  # a prefix is whole words, not characters
    assert profile_for("") == ModelProfile()


def test_a_call_s_cost_prices_each_kind_of_token() -> None:
    prices = Pricing(input=3.0, output=15.0, cache_read=0.3, cache_write=3.75)
    usage = Usage(input_tokens=1_000_000, output_tokens=100_000, cache_read_tokens=600_000, cache_write_tokens=200_000)
    # 200k uncached at $3, 600k read at $0.30, 200k written at $3.75, 100k out at $15 (per million).
    assert prices.cost(usage) == pytest.approx(0.6 + 0.18 + 0.75 + 1.5)
    assert Pricing(input=2.0, output=8.0).cost(usage) == pytest.approx(2.0 + 0.8)  # cache at the input price
    assert Pricing(0, 0).cost(usage) == 0.0


def test_a_profile_without_prices_costs_nothing_known() -> None:
    assert ModelProfile(8192).cost(Usage(10, 10)) is None
    assert ModelProfile(pricing=Pricing(1.0, 1.0)).cost(Usage(500_000, 500_000)) == pytest.approx(1.0)


def test_a_settings_file_overrides_only_what_it_gives() -> None:
    table = KNOWN["gpt-4.1"]
    assert table.overridden(None, None) == table
    assert table.overridden(32_768, None) == ModelProfile(32_768, table.pricing)
    assert table.overridden(None, Pricing(0, 0)) == ModelProfile(table.context_window, Pricing(0, 0))


@pytest.mark.parametrize("prices", [{"input": -1, "output": 1}, {"input": 1, "output": float("nan")},
                                    {"input": True, "output": 1}, {"input": 1, "output": "2"},
                                    {"input": 1, "output": 1, "cache_read": float("inf")}])
def test_a_price_that_makes_no_sense_is_refused(prices: dict[str, Any]) -> None:
    with pytest.raises(ConfigError) as caught:
        Pricing(**prices)
    assert caught.value.code == "invalid_config" and caught.value.message.startswith("price ")


@pytest.mark.parametrize("window", [1023, 0, -1, True, 8192.0, "8192"])
def test_a_window_that_makes_no_sense_is_refused(window: Any) -> None:
    with pytest.raises(ConfigError) as caught:
        ModelProfile(window)
    assert caught.value.code == "invalid_config" and "context_window" in caught.value.message
