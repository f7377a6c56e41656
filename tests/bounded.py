"""Bounded waits for tests: a hang fails the test instead of stalling the suite."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest


def within(seconds: float, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call a blocking function, failing the test if it has not returned in ``seconds``."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = function(*args, **kwargs)
        except BaseException as error:  # noqa: BLE001 - re-raised in the test's thread
            outcome["error"] = error

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        pytest.fail(f"{getattr(function, '__name__', function)!r} did not return within {seconds}s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")
