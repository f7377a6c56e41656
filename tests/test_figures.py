"""Figures as people read them: durations, token counts, dollars and bytes, with a dash for unknown."""

from __future__ import annotations

import pytest

from errand._figures import duration, money, size, tokens


def test_an_unknown_figure_is_a_dash() -> None:
    assert duration(None) == tokens(None) == money(None) == size(None) == "—"


@pytest.mark.parametrize(("seconds", "shown"), [
    (0, "0.0s"), (0.25, "0.2s"), (9.94, "9.9s"), (10, "10s"), (59.9, "59s"), (60, "1m 00s"), (61.5, "1m 01s"),
    (3599, "59m 59s"), (3600, "1h 00m"), (3661, "1h 01m"), (90_000, "25h 00m"),
])
def test_durations(seconds: float, shown: str) -> None:
    assert duration(seconds) == shown


@pytest.mark.parametrize(("count", "shown"), [
    (0, "0"), (999, "999"), (999.7, "999"), (1000, "1.0k"), (12_345, "12.3k"),
    (999_949, "999.9k"), (999_950, "1.00M"), (999_999, "1.00M"), (1_000_000, "1.00M"), (2_345_678, "2.35M"),
    (999_994_999, "999.99M"), (999_995_000, "1.00B"), (1_234_567_890_123, "1,234.57B"), (-12_345, "-12.3k"),
    (float("nan"), "—"), (float("inf"), "—"),
])
def test_token_counts(count: float, shown: str) -> None:
    assert tokens(count) == shown


@pytest.mark.parametrize(("dollars", "shown"), [
    (0, "$0.0000"), (0.00012, "$0.0001"), (0.5, "$0.5000"), (1, "$1.00"), (1234.567, "$1,234.57"),
])
def test_money_shows_cents_of_cents_below_a_dollar(dollars: float, shown: str) -> None:
    assert money(dollars) == shown


@pytest.mark.parametrize(("count", "shown"), [
    (0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (1536, "1.5 KiB"), (1 << 20, "1.0 MiB"),
    (5 * (1 << 30) + (1 << 29), "5.5 GiB"), (1 << 40, "1024.0 GiB"),
])
def test_sizes_in_binary_units(count: int, shown: str) -> None:
    assert size(count) == shown
