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


class Relay:
    """A TCP relay on loopback to the database that can go silent: it stops passing bytes on the
    connections it holds and keeps them open, as a network that drops packets or a stuck pooler
    does. Connections made after that are relayed."""

    def __init__(self, socket: Path) -> None:
        self.target = socket
        self.held: list[asyncio.StreamWriter] = []
        self.frozen: set[asyncio.StreamWriter] = set()
        self.server: asyncio.Server | None = None
        self.relaying: set[asyncio.Task[object]] = set()

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    def freeze(self) -> None:
        self.frozen.update(self.held)

    async def _serve(self, client_in: asyncio.StreamReader, client_out: asyncio.StreamWriter) -> None:
        relaying = asyncio.current_task()
        assert relaying is not None
        self.relaying.add(relaying)
        server_in, server_out = await asyncio.open_unix_connection(self.target)
        self.held.append(client_out)
        await asyncio.gather(self._pipe(client_in, server_out, client_out),
                             self._pipe(server_in, client_out, client_out), return_exceptions=True)

    async def _pipe(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, key: asyncio.StreamWriter) -> None:
        while data := await source.read(65536):
            if key in self.frozen:
                await asyncio.Event().wait()  # silent for good: nothing passes, nothing closes
            sink.write(data)
            await sink.drain()
        sink.close()

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
        for writer in self.held:
            writer.transport.abort()
        for relaying in self.relaying:
            relaying.cancel()
        await asyncio.gather(*self.relaying, return_exceptions=True)


async def test_a_listening_connection_that_goes_silent_is_replaced_and_says_so(
        store: TaskStore, caplog: pytest.LogCaptureFixture) -> None:
    """Nothing arrives on a dead connection, which looks like a quiet database: the listener asks it a
    question every so often, and one unanswered makes it wake everyone and listen on a new connection."""
    task = store.create_task(title="a", instruction="i", repo="/r").id
    url = store.engine.url
    [socket] = Path(str(url.query["host"])).glob(".s.PGSQL.*[0-9]")  # the test cluster listens there only
    relay = Relay(socket)
    port = await relay.start()
    through = sa.create_engine(url.set(host="127.0.0.1", port=port, query={}))
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
