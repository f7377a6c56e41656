"""Word that a task changed, pushed by the database instead of found by polling it.

On PostgreSQL every write that adds an event to a task or moves its state also
sends ``NOTIFY errand_task, '<task id>'`` in the same transaction (see
:mod:`errand.tasks.store.tasks`), so PostgreSQL delivers it when, and only if, the
change commits — to every process listening, on any machine. :class:`TaskChanges`
holds one listening connection per process and wakes whoever subscribed to that
task. A notification says only *which* task changed; the subscriber reads the
store itself, so a notification lost while the connection was being re-made costs
latency (the subscriber's slow fallback poll catches up), never an event.

A connection can also die without a word: a network that drops its packets, a
machine gone, a pooler that stopped relaying. Nothing then arrives, which looks
like a quiet database. So every :data:`QUIET` seconds the listener asks the
database a question; without an answer in :data:`ANSWER` seconds it takes the
connection for dead, says so, wakes every subscriber, and listens on a new one.
(psycopg first sends a cancel and waits up to 5 s for it: finding a dead
connection takes up to ``QUIET + ANSWER + 5`` seconds.)

SQLite has no such channel: :func:`supported` is False there and callers poll; a
:class:`Commits` says cheaply whether anything was committed since their last look.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

if TYPE_CHECKING:
    import psycopg

__all__ = ["CHANNEL", "Commits", "TaskChanges", "notify", "supported"]

log = logging.getLogger("errand.tasks")

CHANNEL = "errand_task"
_RECONNECT = 1.0
#: Seconds between two checks that the listening connection still answers.
QUIET = 30.0
#: Seconds the database has to answer that check before the connection is taken for dead.
ANSWER = 10.0
#: Seconds a new listening connection may take to be made (a slow database is not a dead one).
_CONNECT = 30


def supported(engine: sa.Engine) -> bool:
    return engine.dialect.name == "postgresql"


def notify(connection: sa.Connection, task_id: str) -> None:
    """Say, when this transaction commits, that ``task_id`` changed (a no-op without a channel)."""
    if connection.dialect.name == "postgresql":
        connection.execute(sa.select(sa.func.pg_notify(CHANNEL, task_id)))


class Commits:
    """Whether anything was committed to the store since the last ask, where that is cheap to know:
    SQLite's ``PRAGMA data_version`` on a connection of this object's own (a few microseconds; it
    changes with every commit of any other connection, in any process, that changed the file). Elsewhere, and whenever
    the pragma cannot be read, it says yes. A poller asks before its look, so a commit made during
    the look is seen at the next; after a look that failed, :meth:`forget` makes the next ask yes."""

    def __init__(self, engine: sa.Engine) -> None:
        self._engine = engine if engine.dialect.name == "sqlite" else None
        self._connection: Any = None
        self._seen: object = None

    @property
    def connected(self) -> bool:
        """Whether the next ask reads the pragma at once: no connection to make first (which may wait for
        the database's file), so an event loop may ask without a thread."""
        return self._engine is None or self._connection is not None

    def since_last(self) -> bool:
        if self._engine is None:
            return True
        try:
            if self._connection is None:
                # Out of the pool, for good: it takes no pool slot, and forget() really closes it. A busy
                # database answers at once (and the look says what is wrong) rather than after its timeout.
                connection = self._engine.raw_connection()
                connection.detach()
                self._connection = connection
                self._connection.execute("PRAGMA busy_timeout = 0")
            cursor = self._connection.cursor()
            try:
                cursor.execute("PRAGMA data_version")
                version = cursor.fetchone()
            finally:
                cursor.close()
        except (sa.exc.SQLAlchemyError, sqlite3.Error):
            self.forget()
            return True  # the look says what is wrong
        changed = bool(version != self._seen)
        self._seen = version
        return changed

    def forget(self) -> None:
        """Let go of the connection: the next ask opens another, and says yes."""
        if self._connection is not None:
            with contextlib.suppress(sa.exc.SQLAlchemyError, sqlite3.Error):
                self._connection.close()
        self._connection, self._seen = None, None

    close = forget


class TaskChanges:
    """One process's listener: ``subscribe(task_id, wake)`` calls ``wake()`` on each change of the task,
    ``subscribe_all(wake)`` on each change of any task.

    ``wake`` runs in the event loop that called :meth:`start`. After the listening
    connection drops, every subscriber is woken once (something may have been missed)
    and the connection is made again.
    """

    def __init__(self, engine: sa.Engine, *, quiet: float = QUIET, answer: float = ANSWER) -> None:
        self._conninfo = engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
        self._quiet = quiet
        self._answer = answer
        self._subscribers: dict[str, set[Callable[[], None]]] = {}
        self._everything: set[Callable[[], None]] = set()
        self._reader: asyncio.Task[None] | None = None
        self._listening = asyncio.Event()

    def subscribe(self, task_id: str, wake: Callable[[], None]) -> Callable[[], None]:
        """Call ``wake`` when the task changes; returns the function that ends the subscription."""
        self._subscribers.setdefault(task_id, set()).add(wake)

        def unsubscribe() -> None:
            wakes = self._subscribers.get(task_id)
            if wakes is not None:
                wakes.discard(wake)
                if not wakes:
                    del self._subscribers[task_id]
        return unsubscribe

    def subscribe_all(self, wake: Callable[[], None]) -> Callable[[], None]:
        """Call ``wake`` when any task changes; returns the function that ends the subscription."""
        self._everything.add(wake)
        return lambda: self._everything.discard(wake)

    async def start(self) -> None:
        """Begin listening; returns once the first ``LISTEN`` is in force, so a change
        committed after this returns is heard."""
        if self._reader is None:
            self._reader = asyncio.create_task(self._read(), name="errand-task-changes")
        await self._listening.wait()

    async def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
            self._reader = None

    async def _read(self) -> None:
        import psycopg

        deaf = False  # the connection dropped: changes may have gone unheard since
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(self._conninfo, autocommit=True,
                                                                 connect_timeout=_CONNECT) as connection:
                    await connection.execute(f"LISTEN {CHANNEL}")
                    self._listening.set()
                    if deaf:  # listening again: what changed while nobody listened, each subscriber looks for
                        deaf = False
                        self._wake_all()
                    while True:
                        async for note in connection.notifies(timeout=self._quiet):
                            self._wake({*self._subscribers.get(note.payload, ()), *self._everything})
                        await self._answers(connection)
            except psycopg.Error as error:
                log.warning("listening for task changes failed (%s); polling until it is back", error)
            except _Silent:
                log.warning("the connection listening for task changes gave no answer in %g s; polling until a "
                            "new one listens", self._answer)
            deaf = True
            self._wake_all()  # and now, in case the connection stays away a while
            self._listening.set()  # a caller waiting in start() falls back on polling meanwhile
            await asyncio.sleep(_RECONNECT)

    async def _answers(self, connection: psycopg.AsyncConnection[tuple[object, ...]]) -> None:
        """Raise :class:`_Silent` if the connection does not answer a question in time."""
        try:
            await asyncio.wait_for(connection.execute("SELECT 1"), self._answer)
        except TimeoutError:
            raise _Silent from None

    def _wake_all(self) -> None:
        self._wake({*(wake for wakes in self._subscribers.values() for wake in wakes), *self._everything})

    @staticmethod
    def _wake(wakes: set[Callable[[], None]]) -> None:
        for wake in list(wakes):
            wake()


class _Silent(Exception):
    """The listening connection did not answer."""
