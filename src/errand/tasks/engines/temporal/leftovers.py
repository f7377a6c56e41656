"""A Temporal worker's leftovers: rounds it still holds whose runs all ended elsewhere.

A round's runs can end without this worker being told: its workflow failed or was
terminated and the reconciler (:mod:`errand.tasks.engines.reconcile`) settled them, or a person
cancelled the task when no workflow was left to signal. No activity then comes to close the
round here, and it kept its sandboxes, its mounted working copies and its place (a full
worker waited for room for good). The sweeper closes each such round every third of the
lease, as a closing activity would: sandboxes ended, copies removed, the place freed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from errand.tasks.engines.temporal.worker import TemporalWorker
from errand.tasks.records import RunState

__all__ = ["Swept", "ended_rounds"]

log = logging.getLogger("errand.engine")


def ended_rounds(worker: TemporalWorker) -> dict[str, list[str]]:
    """The rounds ``worker`` holds whose runs have all ended in the store, with their run ids."""
    ended = {}
    for key in sorted(worker.held()):
        task_id, _, number = key.partition("/")
        if not number.isdigit():
            continue
        runs = worker.store.runs(task_id, round=int(number))
        if runs and all(run.state is not RunState.RUNNING for run in runs):
            ended[key] = [run.id for run in runs]
    return ended


class Swept:
    """A Temporal worker with the sweeper beside it while it serves."""

    def __init__(self, worker: TemporalWorker) -> None:
        self.inner = worker
        self.worker = worker.worker

    async def serve(self, *, stop: asyncio.Event | None = None, exit_when_idle: float | None = None,
                    ready: Callable[[], None] | None = None) -> None:
        ended = asyncio.Event()
        sweeping = asyncio.create_task(self._sweep(ended))
        try:
            await self.inner.serve(stop=stop, exit_when_idle=exit_when_idle, ready=ready)
        finally:
            ended.set()
            await sweeping

    async def _sweep(self, ended: asyncio.Event) -> None:
        interval = self.inner.settings.heartbeat / 3
        while not ended.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(ended.wait(), interval)
            try:
                await self.once()
            except Exception as error:  # noqa: BLE001 - the store away: the next sweep tries again
                log.warning("sweeping ended rounds failed (%s); trying again", error)

    async def once(self) -> list[str]:
        """Close the ended rounds held here; their keys."""
        closed = []
        for key, run_ids in (await asyncio.to_thread(ended_rounds, self.inner)).items():
            log.warning("round %s ended elsewhere (its runs are settled); ending its sandboxes and copies here", key)
            await self.inner.close(key, run_ids)
            closed.append(key)
        return closed
