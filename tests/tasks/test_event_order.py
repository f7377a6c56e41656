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

from errand.tasks.events import FORWARDED_KINDS
from errand.tasks.lifecycle import TaskState
from errand.tasks.records import Event
from errand.tasks.store import tasks as tasks_module
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
