"""Closing a round whatever ended it: a baseline that failed before the round's checks awaited it
is said once in the log, not left for asyncio to report with a traceback when it is collected."""

from __future__ import annotations

import asyncio
import gc
import logging
from pathlib import Path
from typing import Any, cast

import pytest

from errand.database import StoreUnreachable
from errand.tasks.round import order
from errand.tasks.store.tasks import TaskStore


async def test_a_round_closed_after_its_base_tests_failed_leaves_no_error_unretrieved(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    unretrieved: list[dict[str, Any]] = []
    asyncio.get_running_loop().set_exception_handler(lambda _loop, context: unretrieved.append(context))

    async def base_tests() -> None:  # as a drill's outage ended it, while the round was being lost
        raise StoreUnreachable("the database was unreachable (gone)", lost=True)

    with TaskStore.open(f"sqlite:///{tmp_path / 'errand.db'}") as store:
        bench = order.Bench(store, "worker-1")
        baseline = asyncio.ensure_future(base_tests())
        await asyncio.wait([baseline])
        unknown = cast(Any, None)
        bench.rounds["t-1:1"] = order._Live(unknown, unknown, unknown, unknown, unknown, copies=[], journals=[],
                                            link=None, sandboxes=[], agents=[], results=[], baseline=baseline)
        with caplog.at_level(logging.INFO, logger="errand.engine"):
            await order.close(bench, "t-1:1", [])
        del baseline
        gc.collect()
    assert unretrieved == []
    assert "round t-1:1: the base's tests ended with: the database was unreachable (gone)" in caplog.text
