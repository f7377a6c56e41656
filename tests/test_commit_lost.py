"""A write whose connection goes as it commits, on PostgreSQL: the server may have kept it or not, and
errand was not told. The store used to say the database "could not be reached" (while it ran) and leave
the write's fate to guesswork. It now asks the server what became of the transaction (``txid_status``):
kept, the call returns what it made; not kept, it is tried again, once. The connection runs through a
relay that cuts it after the server answered the commit (or before the commit reaches the server)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from errand.database import SqlStore
from errand.tasks.lifecycle import TaskState
from errand.tasks.store.schema import tasks
from errand.tasks.store.tasks import TaskStore, insert_event
from pgrelay import Relay, RelayThread

pytestmark = pytest.mark.slow  # PostgreSQL's, as the store's tests on it are


@pytest.fixture
def direct(postgres_url: str) -> Iterator[TaskStore]:
    with TaskStore.open(postgres_url) as opened:
        yield opened


@pytest.fixture(autouse=True)
def asked(monkeypatch: pytest.MonkeyPatch) -> list[bool | None]:
    """What the store heard each time it asked about a commit: the test's cut landed on a write's commit."""
    answers: list[bool | None] = []
    kept = SqlStore._kept

    def asking(self: SqlStore, xid: int, pid: int) -> bool | None:
        answers.append(answer := kept(self, xid, pid))
        return answer

    monkeypatch.setattr(SqlStore, "_kept", asking)
    return answers


@pytest.fixture
def relayed(direct: TaskStore) -> Iterator[tuple[TaskStore, Relay]]:
    """The engine's store (patient) on a connection through the relay."""
    through = RelayThread(direct.engine.url)
    with through as url, TaskStore.open(url.render_as_string(hide_password=False)) as store:
        yield store.patient(60), through.relay


def test_a_claim_whose_commit_answer_was_lost_is_the_workers(direct: TaskStore, relayed: tuple[TaskStore, Relay],
                                                              asked: list[bool | None]) -> None:
    """Told the database was away, the worker would not know it holds the task: preparing under a live
    worker, it would have nobody to run it and no dead worker for recovery to find."""
    store, relay = relayed
    task = direct.create_task(title="a", instruction="i", repo="/r")
    relay.cut_after_commit()
    claimed = store.claim_next("worker-1")
    assert relay.cut and asked == [True], f"the relay cut {len(relay.cut)}, the store heard {asked}"
    assert claimed is not None and claimed.id == task.id
    with direct.engine.connect() as connection:
        kept = connection.execute(sa.select(tasks.c.state, tasks.c.claimed_by).where(tasks.c.id == task.id)).one()
    assert tuple(kept) == (TaskState.PREPARING.value, "worker-1")


def test_an_event_whose_commit_answer_was_lost_is_written_once(direct: TaskStore, relayed: tuple[TaskStore, Relay],
                                                               asked: list[bool | None]) -> None:
    store, relay = relayed
    task = direct.create_task(title="a", instruction="i", repo="/r")
    relay.cut_after_commit()
    written = store.append_event(task.id, None, "model", {"cost_usd": 0.25})
    assert relay.cut and asked == [True], f"the relay cut {len(relay.cut)}, the store heard {asked}"
    assert [(event.id, event.kind) for event in direct.events(task.id)] == [(written, "model")]


def test_a_move_whose_commit_answer_was_lost_does_not_find_its_own_change_a_conflict(
        direct: TaskStore, relayed: tuple[TaskStore, Relay], asked: list[bool | None]) -> None:
    store, relay = relayed
    task = direct.create_task(title="a", instruction="i", repo="/r")
    relay.cut_after_commit()
    moved = store.set_state(task.id, TaskState.CANCELLED, expected=TaskState.QUEUED,
                            event=("cancelled", {"by": "a person"}))
    assert relay.cut and asked == [True], f"the relay cut {len(relay.cut)}, the store heard {asked}"
    assert moved.state is TaskState.CANCELLED
    assert [event.kind for event in direct.events(task.id)] == ["cancelled"]


def test_a_write_whose_commit_never_reached_the_server_is_tried_again_once(
        direct: TaskStore, relayed: tuple[TaskStore, Relay], asked: list[bool | None]) -> None:
    store, relay = relayed
    task = direct.create_task(title="a", instruction="i", repo="/r")
    relay.cut_before_commit()
    written = store.append_event(task.id, None, "note", {"text": "once"})
    assert relay.cut and asked == [False], f"the relay cut {len(relay.cut)}, the store heard {asked}"
    assert [event.id for event in direct.events(task.id)] == [written]


def test_a_persons_command_is_told_what_became_of_its_write_too(direct: TaskStore, asked: list[bool | None]) -> None:
    """A command a person types has an impatient store: with the database there to ask, it answers too."""
    through = RelayThread(direct.engine.url)
    with through as url, TaskStore.open(url.render_as_string(hide_password=False)) as store:
        task = direct.create_task(title="a", instruction="i", repo="/r")
        through.relay.cut_after_commit()
        written = store.append_event(task.id, None, "message_sent", {"text": "once"})
        assert through.relay.cut and asked == [True], f"the store heard {asked}"
    assert [event.id for event in direct.events(task.id)] == [written]


def test_a_write_is_asked_about_by_its_own_transactions_id_not_an_earlier_events(
        direct: TaskStore, relayed: tuple[TaskStore, Relay], asked: list[bool | None]) -> None:
    """An event's lock statement says its transaction's id, sparing the question before the commit; one
    written in a transaction no store began leaves that word on the pooled connection, and the next write
    there, which wrote no event, must ask for its own id: the earlier one was kept, this one was not."""
    store, relay = relayed
    task = direct.create_task(title="a", instruction="i", repo="/r")
    with store.engine.connect() as connection, connection.begin():
        insert_event(connection, task.id, None, "note", {"text": "written outside a store's transaction"})
    relay.cut_before_commit()
    claimed = store.claim_next("worker-1")
    # Taking the earlier word, the claim would not ask its id (the relay, which cuts a write's commit once
    # it asked, would cut nothing), and would hear that the earlier transaction was kept.
    assert relay.cut and asked == [False], f"the relay cut {len(relay.cut)}, the store heard {asked}"
    assert claimed is not None and claimed.id == task.id
