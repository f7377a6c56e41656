"""Word that a task changed, pushed by PostgreSQL when (and only if) the change commits, to each
subscriber of that task; SQLite has no such channel and its callers poll."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from errand.tasks.store.changes import TaskChanges, notify, supported
from errand.tasks.store.tasks import TaskStore
from pgrelay import Relay
from polling import settled

pytestmark = pytest.mark.slow  # PostgreSQL's, as the store's tests on it are
WAIT = 120  # seconds: a bound for a saturated machine, never a measure


class Woken:
    """A subscriber that counts its wakes and can be waited on."""

    def __init__(self) -> None:
        self.count = 0
        self.event = asyncio.Event()

    def __call__(self) -> None:
        self.count += 1
        self.event.set()

    async def once(self) -> None:
        await asyncio.wait_for(self.event.wait(), WAIT)
        self.event.clear()


@pytest.fixture
def store(postgres_url: str) -> Iterator[TaskStore]:
    with TaskStore.open(postgres_url) as opened:
        yield opened


def test_sqlite_has_no_channel_and_notifying_there_does_nothing(tmp_path: Path) -> None:
    with TaskStore.open(f"sqlite:///{tmp_path / 'errand.db'}") as store:
        assert not supported(store.engine)
        with store.engine.begin() as connection:
            notify(connection, "t-1")  # a no-op, not an error


async def test_a_committed_change_wakes_that_tasks_subscribers_only(store: TaskStore) -> None:
    assert supported(store.engine)
    first = store.create_task(title="a", instruction="i", repo="/r").id
    second = store.create_task(title="b", instruction="i", repo="/r").id
    changes = TaskChanges(store.engine)
    woken_first, woken_second = Woken(), Woken()
    changes.subscribe(first, woken_first)
    changes.subscribe(second, woken_second)
    try:
        await changes.start()
        await asyncio.to_thread(store.append_event, first, None, "note", {"text": "x"})
        await woken_first.once()
        await asyncio.to_thread(store.append_event, second, None, "note", {"text": "y"})
        await woken_second.once()
        # Delivered in commit order: the second task's change came after any word of the first.
        assert (woken_first.count, woken_second.count) == (1, 1)
    finally:
        await changes.close()


async def test_a_rolled_back_change_and_an_ended_subscription_wake_nobody(store: TaskStore) -> None:
    task = store.create_task(title="a", instruction="i", repo="/r").id
    other = store.create_task(title="b", instruction="i", repo="/r").id
    changes = TaskChanges(store.engine)
    woken, later, witness = Woken(), Woken(), Woken()
    unsubscribe = changes.subscribe(task, woken)
    changes.subscribe(other, witness)
    try:
        await changes.start()

        def rolled_back() -> None:
            with pytest.raises(RuntimeError), store.engine.begin() as connection:
                notify(connection, task)
                connection.execute(sa.text("SELECT 1"))
                raise RuntimeError("the transaction fails")

        await asyncio.to_thread(rolled_back)
        await asyncio.to_thread(store.append_event, other, None, "note", {"text": "x"})
        await witness.once()  # the change after it arrived; the rolled-back one never will
        assert woken.count == 0
        unsubscribe()
        unsubscribe()  # twice is once
        changes.subscribe(task, later)
        await asyncio.to_thread(store.append_event, task, None, "note", {"text": "y"})
        await later.once()
        assert woken.count == 0
    finally:
        await changes.close()


async def test_a_listening_connection_that_goes_silent_is_replaced_and_says_so(
        store: TaskStore, caplog: pytest.LogCaptureFixture) -> None:
    """Nothing arrives on a dead connection, which looks like a quiet database: the listener asks it a
    question every so often, and one unanswered makes it wake everyone and listen on a new connection."""
    task = store.create_task(title="a", instruction="i", repo="/r").id
    relay = Relay(store.engine.url)
    through = sa.create_engine(await relay.start())
    changes = TaskChanges(through, quiet=0.2, answer=1.0)
    woken = Woken()
    changes.subscribe(task, woken)
    try:
        await changes.start()
        await asyncio.to_thread(store.append_event, task, None, "note", {"text": "heard"})
        await woken.once()
        relay.freeze()
        await woken.once()  # the silent connection was found out: everyone looks
        assert "gave no answer" in caplog.text
        await asyncio.to_thread(settled, lambda: len(relay.held) >= 2, WAIT)  # listening anew
        woken.event.clear()
        await asyncio.to_thread(store.append_event, task, None, "note", {"text": "heard again"})
        await woken.once()
    finally:
        await changes.close()
        await relay.close()
        through.dispose()
