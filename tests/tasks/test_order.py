"""The order of a round's steps (``tasks/round/order.py``): what holds across its attempts."""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace
from typing import Any

import pytest

from errand.tasks.round import order


async def test_a_rounds_live_handles_are_rebuilt_once_however_many_of_its_attempts_ask_at_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """After a Temporal worker restarts, each attempt of a round asks for its live handles as it
    resumes. Rebuilt once per asker, the overlays were mounted over each other and the last
    rebuild's handles replaced the others', whose sandboxes the round's close then never ended.
    An asker cancelled meanwhile leaves the rebuild to the others."""
    made: list[object] = []
    go = threading.Event()

    def rebuilt(_bench: object, _prepared: object) -> object:
        made.append(handles := object())
        assert go.wait(30)
        return handles

    monkeypatch.setattr(order, "_rebuilt", rebuilt)
    bench = order.Bench(store=None, worker="w", gateway=None)  # type: ignore[arg-type]  # not read: _rebuilt is replaced
    prepared: Any = SimpleNamespace(key="t-1:1")
    asking = [asyncio.ensure_future(order._live(bench, prepared)) for _ in range(3)]
    for _ in range(20):  # each asker runs to where it waits (no clock: the loop's own turns)
        await asyncio.sleep(0)
    asking[0].cancel()
    go.set()
    live = await asyncio.gather(*asking[1:])
    assert len(made) == 1 and live == made * 2 and bench.rounds == {"t-1:1": made[0]}
    assert bench.rebuilding == {} and asking[0].cancelled()
    assert await order._live(bench, prepared) is made[0]  # kept: asked again, not rebuilt


async def test_a_round_closed_while_its_handles_are_rebuilt_is_closed_after_the_rebuild(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The round's close comes while its live handles are being rebuilt (the Temporal worker's close
    cancels the round's attempts, one of them rebuilding, and closes at once). The rebuild runs on,
    shielded; the close must wait for it: closed first, it removed the work before the rebuild mounted
    the copy again, and the rebuild then left its handles in bench.rounds, of a round closed already."""
    said: list[str] = []
    go = threading.Event()

    def rebuilt(_bench: object, _prepared: object) -> object:
        assert go.wait(30)
        said.append("mounted")  # as _reopened: the copy's overlay mounted again
        return SimpleNamespace(closed=False, baseline=None, grants={}, sandboxes=[], journals=[])

    monkeypatch.setattr(order, "_rebuilt", rebuilt)
    monkeypatch.setattr(order.steps, "remove_work_of", lambda run_id: said.append(f"removed {run_id}"))
    bench = order.Bench(store=None, worker="w", gateway=None)  # type: ignore[arg-type]  # not read: _rebuilt is replaced
    prepared: Any = SimpleNamespace(key="t-1/1")
    asking = asyncio.ensure_future(order._live(bench, prepared))
    for _ in range(20):
        await asyncio.sleep(0)
    asking.cancel()  # the close's _forget cancels the attempt
    closing = asyncio.ensure_future(order.close(bench, "t-1/1", ["t-1-r1"]))
    for _ in range(20):
        await asyncio.sleep(0)
    go.set()
    await closing
    for _ in range(200):  # the rebuild's thread, if the close did not wait for it
        if not bench.rebuilding:
            break
        await asyncio.sleep(0.01)
    assert said == ["mounted", "removed t-1-r1"]
    assert bench.rounds == {} and bench.rebuilding == {}
