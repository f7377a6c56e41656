"""Readers keep the last event id they read (a task's live feed, the local engine's controls, the
Temporal dispatcher's forwarded kinds across every task), so on PostgreSQL, where an id is taken at
insert and transactions commit in any order, an event must never become visible after one with a
higher id that its reader reads. Each test holds one writer's transaction open after its insert,
starts a second writer, and waits until the second has either committed or is waiting for the first:
a reader then must not see the second without the first."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import psycopg
import pytest
import sqlalchemy as sa

from errand.database import StoreUnreachable
from errand.tasks.events import FORWARDED_KINDS
from errand.tasks.lifecycle import TaskState
from errand.tasks.records import Event
from errand.tasks.store import claims
from errand.tasks.store import tasks as tasks_module
from errand.tasks.store.schema import tasks
from errand.tasks.store.tasks import TaskStore, insert_event
from polling import settled

pytestmark = pytest.mark.slow  # PostgreSQL's, as the store's tests on it are
WAIT = 120  # seconds: a bound for a saturated machine, never a measure


@pytest.fixture
def store(postgres_url: str) -> Iterator[TaskStore]:
    with TaskStore.open(postgres_url) as opened:
        yield opened


def _waiting_for_a_lock(store: TaskStore) -> bool:
    url = store.engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(url, autocommit=True) as connection:
        row = connection.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                                 "AND wait_event_type = 'Lock'").fetchone()
    return row is not None and row[0] > 0


def _race(store: TaskStore, first_task: str, first_kind: str, second: Callable[[], int],
          read: Callable[[], list[Event]]) -> tuple[int, int, list[Event]]:
    """Insert ``first_kind`` for ``first_task`` and hold its transaction open; run ``second`` on a
    thread until it has committed or waits; read; commit the first. The ids and what was read."""
    ids: list[int] = []
    with store.engine.connect() as slow:
        transaction = slow.begin()
        first = insert_event(slow, first_task, None, first_kind, {"text": "the first"})
        writer = threading.Thread(target=lambda: ids.append(second()))
        writer.start()
        try:
            assert settled(lambda: ids or _waiting_for_a_lock(store), WAIT), "the second writer neither ended nor waits"
            seen = read()
        finally:
            transaction.commit()
            writer.join(WAIT)
    assert ids, "the second writer never ended"
    return first, ids[0], seen


def test_a_tasks_event_committed_late_is_not_overtaken_by_a_later_one(store: TaskStore) -> None:
    task = store.create_task(title="a", instruction="i", repo="/r").id
    first, second, seen = _race(store, task, "note", lambda: store.append_event(task, None, "note", {"text": "2"}),
                                lambda: store.events(task))
    assert first < second
    ids = [event.id for event in seen]
    assert second not in ids or first in ids, f"read {ids}: event {second} without {first}, which committed later"
    assert [event.id for event in store.events(task)] == [first, second]


def test_a_control_committed_late_is_not_overtaken_by_another_tasks(store: TaskStore) -> None:
    one = store.create_task(title="a", instruction="i", repo="/r").id
    two = store.create_task(title="b", instruction="i", repo="/r").id
    first, second, seen = _race(
        store, one, "message_sent", lambda: store.append_event(two, None, "answer_sent", {"text": "2"}),
        lambda: store.events_since(0, FORWARDED_KINDS))
    ids = [event.id for event in seen]
    assert second not in ids or first in ids, f"read {ids}: control {second} without {first}, which committed later"
    assert [event.id for event in store.events_since(0, FORWARDED_KINDS)] == sorted([first, second])


def test_a_cancel_is_ordered_with_the_controls(store: TaskStore) -> None:
    one = store.create_task(title="a", instruction="i", repo="/r").id
    two = store.create_task(title="b", instruction="i", repo="/r").id

    def cancel() -> int:
        store.set_state(two, TaskState.CANCELLED, event=("cancelled", {"by": "someone"}))
        return store.events(two, kinds=["cancelled"])[-1].id

    first, second, seen = _race(store, one, "answer_sent", cancel, lambda: store.events_since(0, FORWARDED_KINDS))
    ids = [event.id for event in seen]
    assert second not in ids or first in ids, f"read {ids}: the cancel {second} without {first}, committed later"


def test_other_tasks_events_do_not_wait_for_an_open_transaction(store: TaskStore) -> None:
    """Only one task's writers take turns (and, across tasks, those of the forwarded kinds): a task's
    progress is never held up by another's open transaction."""
    one = store.create_task(title="a", instruction="i", repo="/r").id
    two = store.create_task(title="b", instruction="i", repo="/r").id
    with store.engine.connect() as slow, slow.begin():
        insert_event(slow, one, None, "message_sent", {"text": "held"})
        written = store.append_event(two, None, "note", {"text": "not held up"})
        assert [event.id for event in store.events(two)] == [written]


def test_a_holder_that_stops_answering_is_ended_and_the_others_go_on(
        store: TaskStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """A process frozen (or gone with its machine) after writing a control holds the forwarded kinds'
    lock; the database ends its transaction once it sits idle past the bound, and the others write."""
    monkeypatch.setattr(tasks_module, "IDLE_HOLDER_MS", 300)
    one = store.create_task(title="a", instruction="i", repo="/r").id
    two = store.create_task(title="b", instruction="i", repo="/r").id
    with store.engine.connect() as frozen:
        transaction = frozen.begin()
        insert_event(frozen, one, None, "message_sent", {"text": "never committed"})
        written: list[int] = []
        writer = threading.Thread(target=lambda: written.append(store.append_event(two, None, "message_sent", {})),
                                  daemon=True)
        writer.start()  # it waits out the bound
        assert settled(lambda: written, WAIT), "another task's control still waits for the frozen holder"
        with pytest.raises(sa.exc.DBAPIError):
            transaction.commit()
    assert [event.id for event in store.events_since(0, FORWARDED_KINDS)] == written


def _waits_for(store: TaskStore, *events: str) -> bool:
    url = store.engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(url, autocommit=True) as connection:
        row = connection.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                                 "AND wait_event_type = 'Lock' AND wait_event = ANY(%s)", (list(events),)).fetchone()
    return row is not None and row[0] > 0


def test_a_requeue_and_a_message_to_the_same_task_take_turns_without_a_deadlock(store: TaskStore) -> None:
    """The message's insert checks its foreign key, which locks the task's row FOR KEY SHARE; a requeue
    holds that row FOR UPDATE before its own event. Held just before its insert, the message must not
    end up waiting on the requeue while the requeue waits on it (PostgreSQL would end one of them)."""
    task = store.create_task(title="a", instruction="i", repo="/r").id
    assert store.claim_next("w1") is not None  # preparing, no run: what requeue_unbegun requeues
    held: list[threading.Thread] = []
    at_insert, go = threading.Event(), threading.Event()

    def hold(_connection: object, _cursor: object, statement: str, *_rest: object) -> None:
        if threading.current_thread() in held and statement.startswith("INSERT INTO events"):
            at_insert.set()
            go.wait(WAIT)

    sa.event.listen(store.engine, "before_cursor_execute", hold)
    outcome: dict[str, object] = {}

    def call(name: str, work: Callable[[], object]) -> None:
        try:
            outcome[name] = work()
        except Exception as error:  # noqa: BLE001 - the outcome is the test's
            outcome[name] = error

    message = threading.Thread(target=call, args=(
        "message", lambda: store.append_event(task, None, "message_sent", {"text": "hello"})))
    held.append(message)
    message.start()
    requeue = threading.Thread(target=call, args=(
        "requeue", lambda: claims.requeue_unbegun(store, task, reason="lost", rule="r")))
    try:
        assert at_insert.wait(WAIT)
        requeue.start()
        waiting = settled(lambda: _waits_for(store, "advisory", "tuple", "transactionid"), WAIT)
        assert waiting, "the requeue never waited"
    finally:
        go.set()
        message.join(WAIT)
        requeue.join(WAIT)
        sa.event.remove(store.engine, "before_cursor_execute", hold)
    errors = {name: str(e).splitlines()[0] for name, e in outcome.items() if isinstance(e, BaseException)}
    assert not errors, f"ended by the database: {errors}"
    assert outcome["requeue"] is True


def _advisory_locks_held(store: TaskStore) -> int:
    url = store.engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(url, autocommit=True) as connection:
        row = connection.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted "
                                  "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
                                  ).fetchone()
    return row[0] if row is not None else 0


@pytest.mark.parametrize("kind", ["note", "message_sent"])
def test_an_events_writer_waits_for_the_tasks_row_before_it_takes_the_event_lock(store: TaskStore, kind: str) -> None:
    """The task's row and the event lock are taken by one statement (one round trip less for the writers
    waiting on that lock): the row, FOR KEY SHARE, must still come first. A writer holding the row FOR UPDATE
    that then writes an event (requeue_unbegun) would otherwise wait on the event lock while its holder
    waits on the row, and PostgreSQL would end one of them."""
    task = store.create_task(title="a", instruction="i", repo="/r").id
    outcome: list[object] = []

    def write() -> None:
        try:
            outcome.append(store.append_event(task, None, kind, {"text": "waits for the row"}))
        except Exception as error:  # noqa: BLE001 - the outcome is the test's
            outcome.append(error)

    with store.engine.connect() as holder:
        transaction = holder.begin()
        holder.execute(sa.select(tasks.c.id).where(tasks.c.id == task).with_for_update())
        writer = threading.Thread(target=write)
        writer.start()
        try:
            assert settled(lambda: outcome or _waits_for(store, "tuple", "transactionid"), WAIT), \
                "the writer did not wait for the row"
            held = _advisory_locks_held(store)
            first = insert_event(holder, task, None, "recovered", {"reason": "the holder's own"})
            transaction.commit()
        finally:
            if transaction.is_active:
                transaction.rollback()
            writer.join(WAIT)
    assert held == 0, "the writer took the event lock before the task's row, which another transaction held"
    assert len(outcome) == 1 and isinstance(outcome[0], int), f"the writer was ended: {outcome}"
    assert [event.id for event in store.events(task)] == [first, outcome[0]]


def test_a_reader_of_the_forwarded_kinds_starts_after_every_one_in_flight(store: TaskStore) -> None:
    """The dispatcher starts where the forwarded kinds end, once those in flight are committed: it used to
    start at the newest event of any kind, and a control still being written, with an id below another
    task's newer event, was then never forwarded."""
    one = store.create_task(title="a", instruction="i", repo="/r").id
    two = store.create_task(title="b", instruction="i", repo="/r").id
    starts: list[int] = []
    with store.engine.connect() as slow:
        transaction = slow.begin()
        control = insert_event(slow, one, None, "message_sent", {"text": "in flight"})
        later = store.append_event(two, None, "note", {"text": "another task's progress"})  # not held up
        reader = threading.Thread(target=lambda: starts.append(store.last_forwarded_id()))
        reader.start()
        assert settled(lambda: starts or _waits_for(store, "advisory"), WAIT), "the reader neither started nor waits"
        transaction.commit()
    reader.join(WAIT)
    assert later > control
    # It waited for the control to commit, and starts after it: a reader that started below it would
    # have taken another task's newer event for where the forwarded kinds end, and passed it by.
    assert starts == [control], f"started at {starts}, not after the control {control} in flight"


def _stalls_once_after_its_insert(store: TaskStore, monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    """insert_event's process stops answering right after its insert, once: the database ends it."""
    stalled: list[bool] = []

    def stall(_connection: object, _cursor: object, statement: str, *_rest: object) -> None:
        if statement.startswith("INSERT INTO events") and not stalled:
            stalled.append(True)
            threading.Event().wait(seconds)

    sa.event.listen(store.engine, "after_cursor_execute", stall)
    monkeypatch.setattr(tasks_module, "IDLE_HOLDER_MS", 300)


def test_an_engines_write_the_database_ended_while_idle_is_made_again_once(
        store: TaskStore, monkeypatch: pytest.MonkeyPatch) -> None:
    task = store.create_task(title="a", instruction="i", repo="/r").id
    _stalls_once_after_its_insert(store, monkeypatch, 1.5)
    store.patient(10).append_event(task, None, "message_sent", {"text": "once"})
    assert [event.kind for event in store.events(task)] == ["message_sent"]


def test_a_persons_write_the_database_ended_while_idle_is_not_said_to_be_a_database_away(
        store: TaskStore, monkeypatch: pytest.MonkeyPatch) -> None:
    task = store.create_task(title="a", instruction="i", repo="/r").id
    _stalls_once_after_its_insert(store, monkeypatch, 1.5)
    with pytest.raises(StoreUnreachable) as raised:
        store.append_event(task, None, "message_sent", {"text": "lost"})
    assert store.events(task) == []
    assert raised.value.lost and "idle-in-transaction" in raised.value.message, raised.value.message
    assert "could not be reached" not in raised.value.message and "is it running" not in raised.value.message


# The short ones stay just under the writer's 60 s: a server that ends the test's own idle transaction
# on a saturated machine would fail it for the wrong reason.
@pytest.mark.parametrize("server", ["0", "59999", "59500ms", "30s", "61s", "1min", "2h", "1d"])
@pytest.mark.parametrize("style", ["postgres", "sql_standard"])
def test_an_events_writer_bounds_its_idle_time_by_the_servers_whatever_its_unit(
        postgres_url: str, server: str, style: str) -> None:
    """The server's idle_in_transaction_session_timeout, read with current_setting in whatever unit it
    shows, bounds the writer's own when it is shorter; 0 (none) leaves the writer's."""
    with TaskStore.open(postgres_url) as store:
        task = store.create_task(title="a", instruction="i", repo="/r")
        with store.engine.connect() as connection:
            connection.execute(sa.text(f"SET idle_in_transaction_session_timeout = '{server}'"))
            connection.execute(sa.text(f"SET IntervalStyle = '{style}'"))
            setting = sa.text("SELECT setting::bigint FROM pg_settings"
                              " WHERE name = 'idle_in_transaction_session_timeout'")
            servers = connection.execute(setting).scalar()
            connection.commit()
            with connection.begin():
                insert_event(connection, task.id, None, "note", {})
                bound = connection.execute(setting).scalar()
    assert bound == (tasks_module.IDLE_HOLDER_MS if servers == 0 else min(servers, tasks_module.IDLE_HOLDER_MS))
