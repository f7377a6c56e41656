"""The Temporal engine's store-side pieces, without a Temporal service: the outbox a round is
written into before it is sent, the fence that keeps a stalled worker out of the runs it lost,
the lease renewal that notices it passed, and the store's patience with a database that is away."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import sqlalchemy as sa

from errand.database import StoreUnreachable
from errand.errors import ConfigError
from errand.tasks.engines.lease import _renew_unexpired
from errand.tasks.engines.temporal.fence import append_if_held, lost
from errand.tasks.engines.temporal.outbox import Outbox
from errand.tasks.errors import RunNotRunning
from errand.tasks.lifecycle import TaskState
from errand.tasks.store.tasks import TaskStore


def _task(store: TaskStore) -> str:
    return store.create_task(title="t", instruction="i", repo="/r").id


def test_a_claim_writes_its_round_into_the_outbox_until_acknowledged(store: TaskStore) -> None:
    outbox = Outbox(store)
    first, second = _task(store), _task(store)
    claimed = outbox.claim("temporal:serve")
    assert claimed is not None
    task, dispatch = claimed
    assert task.id == first and task.state is TaskState.PREPARING and dispatch.task_id == first
    assert outbox.pending() == [dispatch]
    outbox.unanswered(dispatch, RuntimeError("tcp connect error"))
    [waiting] = outbox.pending()
    assert waiting.tries == 1 and waiting.last_error == "tcp connect error"
    outbox.acknowledged(dispatch)
    assert outbox.pending() == []
    again = outbox.add(first)  # a round found lost after a restart is written again, with a new key
    assert again.id != dispatch.id and [d.task_id for d in outbox.pending()] == [first]
    claimed_next = outbox.claim("temporal:serve")
    assert claimed_next is not None and claimed_next[0].id == second
    assert outbox.claim("temporal:serve") is None


def test_a_stalled_worker_writes_nothing_into_a_run_it_lost(store: TaskStore) -> None:
    task_id = _task(store)
    run = store.start_run(task_id, "worker-a")
    append_if_held(store, "worker-a", task_id, run.id, "output", {"text": "mine"})
    with pytest.raises(RunNotRunning):
        append_if_held(store, "worker-b", task_id, run.id, "output", {"text": "not mine"})
    assert not lost(store, "worker-a", [run.id])
    store.interrupt_runs([run.id])  # its workflow found it silent and took the round
    assert lost(store, "worker-a", [run.id])
    with pytest.raises(RunNotRunning):
        append_if_held(store, "worker-a", task_id, run.id, "output", {"text": "late"})
    assert [e.data.get("text") for e in store.events(task_id, run_id=run.id)] == ["mine"]


def test_a_lease_renewed_after_it_passed_says_so(store: TaskStore) -> None:
    store.register_worker("temporal:w", home="temporal", lease=30)
    assert _renew_unexpired(store, "temporal:w", 30)
    store.register_worker("temporal:w", home="temporal", lease=-1)  # as a worker stalled past its lease
    assert not _renew_unexpired(store, "temporal:w", 30)


def test_a_patient_store_waits_for_a_database_that_comes_back(tmp_path: Path) -> None:
    directory = tmp_path / "later"
    url = f"sqlite:///{directory / 'errand.db'}"  # its directory is missing: SQLite cannot open it yet
    store = TaskStore(sa.create_engine(url))
    with pytest.raises(StoreUnreachable) as away:  # an impatient store says so at once
        store.last_event_id()
    assert "could not be reached" in away.value.message and isinstance(away.value, sa.exc.SQLAlchemyError)

    async def later() -> None:  # the database appears whole, at once
        await asyncio.sleep(0.5)
        staging = tmp_path / "staging"
        staging.mkdir()
        TaskStore.open(f"sqlite:///{staging / 'errand.db'}").close()
        staging.rename(directory)

    async def main() -> int:
        appearing = asyncio.create_task(later())
        found = await asyncio.to_thread(store.patient(60).last_event_id)
        await appearing
        return found

    assert asyncio.run(main()) == 0


@pytest.mark.parametrize("value", ["soon", "-1"])
def test_a_bad_store_retry_is_refused(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ERRAND_STORE_RETRY_SECONDS", value)
    with pytest.raises(ConfigError) as refused:
        TaskStore.open("sqlite://").patient()
    assert refused.value.code == "bad_store_retry"
