"""The store's figures for /metrics: counted once however often read, and a late commit never skipped."""

from __future__ import annotations

import time
from pathlib import Path

import sqlalchemy as sa

from errand.tasks.store import census
from errand.tasks.store.schema import events
from errand.tasks.store.tasks import TaskStore


def store_at(tmp_path: Path) -> TaskStore:
    return TaskStore.open(f"sqlite:///{tmp_path / 'errand.db'}")


def test_states_queue_age_and_counts(tmp_path: Path) -> None:
    store = store_at(tmp_path)
    first = store.create_task(title="one", instruction="one", repo="/r")
    store.create_task(title="two", instruction="two", repo="/r")
    now = census.take(store, now=store.get_task(first.id).updated_at + 30)
    assert now.tasks_by_state["queued"] == 2
    assert now.tasks_by_state["failed"] == 0
    assert 30 <= now.oldest_queued_age < 31  # type: ignore[operator]
    assert now.rounds.count == 0
    store.close()


def test_each_event_is_counted_once_however_often_read(tmp_path: Path) -> None:
    store = store_at(tmp_path)
    task = store.create_task(title="t", instruction="t", repo="/r")
    store.append_event(task.id, None, "model", {"input_tokens": 100, "output_tokens": 20, "cost": 0.25})
    tally = census.Tally(settle_seconds=0.0)  # everything older than now is settled
    kinds, usage = tally.read(store)
    assert kinds["model"] == 1 and usage.input_tokens == 100 and usage.cost == 0.25
    store.append_event(task.id, None, "model", {"input_tokens": 1, "output_tokens": 2})
    store.append_event(task.id, None, "cancelled", {})
    for _ in range(3):
        kinds, usage = tally.read(store)
        assert (kinds["model"], kinds["cancelled"]) == (2, 1)
        assert (usage.calls, usage.input_tokens, usage.output_tokens) == (2, 101, 22)
    store.close()


def test_an_event_that_commits_late_below_the_newest_id_is_counted(tmp_path: Path) -> None:
    # On PostgreSQL an id is handed out before its row commits, so a reader can see id 3 before id 2.
    store = store_at(tmp_path)
    task = store.create_task(title="t", instruction="t", repo="/r")
    now = time.time()
    with store.engine.begin() as connection:
        connection.execute(sa.insert(events).values(id=1, task_id=task.id, time=now - 600, kind="model", data={}))
        connection.execute(sa.insert(events).values(id=3, task_id=task.id, time=now, kind="model", data={}))
    tally = census.Tally()
    assert tally.read(store, now=now)[0]["model"] == 2
    with store.engine.begin() as connection:  # id 2 commits only now
        connection.execute(sa.insert(events).values(id=2, task_id=task.id, time=now, kind="model", data={}))
    assert tally.read(store, now=now)[0]["model"] == 3
    assert tally.read(store, now=now + census.SETTLE_SECONDS + 1)[0]["model"] == 3
    store.close()


def test_egress_refusals_add_up_what_each_sandboxs_record_lists_and_counts(tmp_path: Path) -> None:
    store = store_at(tmp_path)
    task = store.create_task(title="t", instruction="t", repo="/r")
    store.append_event(task.id, None, "egress", {"role": "setup", "refused": [{"host": "a"}, {"host": "b"}],
                                                 "more_refused": 5})
    store.append_event(task.id, None, "egress", {"role": "agent", "refused": [], "more_refused": 0})
    _, usage = census.Tally(settle_seconds=0.0).read(store)
    assert usage.egress_refusals == 7
    store.close()
