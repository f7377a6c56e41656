"""The Temporal engine through outages longer than any retry budget: the Temporal dev server
killed while a task is submitted, PostgreSQL stopped with ``pg_ctl`` while rounds run. When the
dependency comes back, the work goes on; nothing stays ``preparing`` or ``running`` for good."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from errand.tasks.lifecycle import TaskState
from errand.tasks.records import RunState
from errand.tasks.service import TaskService
from errand.tasks.store import TaskStore
from temporal import TemporalServer

from .harness import FIX_SCRIPT, running_engine, scripted, wait_for_state

pytestmark = [pytest.mark.faults, pytest.mark.slow]
S = TaskState
#: The Temporal client retries a call for ~17 s before it gives up (FIELD-NOTES): an outage longer.
PAST_THE_CLIENTS_RETRIES = 25.0


@pytest.fixture
def own_temporal(monkeypatch: pytest.MonkeyPatch, temporal_queue: str) -> Iterator[TemporalServer]:
    """A Temporal dev server of this test's own (it is killed), in this process's environment."""
    server = TemporalServer()
    server.start()
    monkeypatch.setenv("ERRAND_TEMPORAL", server.address)
    try:
        yield server
    finally:
        server.remove()


async def test_a_task_submitted_while_temporal_is_down_runs_when_it_is_back(
        tmp_path: Path, repo: Path, script_file: Path, own_temporal: TemporalServer) -> None:
    store = TaskStore.open(f"sqlite:///{tmp_path / 'errand.db'}")
    service = TaskService(store)
    model = scripted(FIX_SCRIPT)
    async with running_engine(store, lambda _s, _i: model, kind="temporal"):
        own_temporal.kill()
        task = service.submit("Make test_calc.py pass", repo=repo, model=f"scripted:{script_file}")
        await wait_for_state(store, task.id, S.PREPARING)  # claimed: its round is on its way to Temporal
        await asyncio.sleep(PAST_THE_CLIENTS_RETRIES)
        assert store.get_task(task.id).state is S.PREPARING
        await asyncio.to_thread(own_temporal.start)  # the same state file and port
        finished = await wait_for_state(store, task.id, S.READY_FOR_REVIEW, S.FAILED, seconds=300)
    assert finished.state is S.READY_FOR_REVIEW, store.events(task.id)[-4:]
    [run] = store.runs(task.id)  # one round, though its dispatch was tried again and again
    assert run.state is RunState.SUCCEEDED
    store.close()
