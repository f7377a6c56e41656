"""Retrying a failed model call: delays that double up to a cap, a provider's retry-after obeyed up to
its own cap, and policies that make no sense refused."""

from __future__ import annotations

from typing import Any

import pytest

from errand.agent.retry import RetryPolicy, SystemClock
from errand.errors import ConfigError


def test_retry_delays_double_up_to_a_cap_and_obey_retry_after() -> None:
    policy = RetryPolicy(base_delay=1.0, max_delay=8.0)
    assert [policy.delay(n, None) for n in range(1, 6)] == [1.0, 2.0, 4.0, 8.0, 8.0]
    assert policy.delay(1, 30.0) == 30.0 and policy.delay(1, 10_000.0) == 600.0


def test_a_retry_after_below_zero_is_no_wait_and_no_delay_is_a_retry_at_once() -> None:
    assert RetryPolicy().delay(3, -5.0) == 0.0
    assert RetryPolicy(base_delay=0.0).delay(4, None) == 0.0
    assert RetryPolicy(max_retry_after=0.0).delay(1, 120.0) == 0.0


@pytest.mark.parametrize("options", [{"max_retries": -1}, {"max_retries": True}, {"max_retries": 1.5},
                                     {"base_delay": -1.0}, {"max_delay": float("inf")},
                                     {"max_retry_after": float("nan")}, {"base_delay": "1"}, {"max_delay": False}])
def test_a_policy_that_makes_no_sense_is_refused(options: dict[str, Any]) -> None:
    with pytest.raises(ConfigError) as caught:
        RetryPolicy(**options)
    assert caught.value.code == "invalid_budget" and next(iter(options)) in caught.value.message


async def test_the_system_clock_moves_forward_and_a_zero_sleep_returns() -> None:
    clock = SystemClock()
    before = clock.monotonic()
    await clock.sleep(0)
    assert clock.monotonic() >= before
