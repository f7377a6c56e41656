"""Workers' leases: a worker elsewhere can tell a dead worker (lease expired) from a slow one,
and takes over only the dead one's runs; several workers claim from one queue without clashing."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Iterator

import sqlalchemy as sa

from errand.tasks.engines.reconcile import Reconciler
from errand.tasks.events import Failed
from errand.tasks.lifecycle import TaskState
from errand.tasks.records import Recovery, RunState
from errand.tasks.store.tasks import MAX_LOST_BEFORE_A_RUN, TaskStore

S = TaskState
LONG = 3600.0
EXPIRED = -1.0  # a lease that ran out a second ago: no test waits for one to expire


def running_task(store: TaskStore, worker: str) -> tuple[str, str]:
    store.create_task(title="t", instruction="i", repo="/r")
    task = store.claim_next(worker)
    assert task is not None
    run = store.start_run(task.id, worker)
    store.set_state(task.id, S.RUNNING, expected=S.PREPARING)
    return task.id, run.id


def test_a_live_workers_runs_are_left_alone_by_a_worker_elsewhere(store: TaskStore) -> None:
    store.register_worker("a:1", home="a:/home", lease=LONG)
    store.register_worker("b:1", home="b:/home", lease=LONG)
    task_id, run_id = running_task(store, "a:1")
    assert store.recover_dead_workers("b:1", home="b:/home") == []
    assert store.get_run(run_id).state is RunState.RUNNING and store.get_task(task_id).state is S.RUNNING
    assert store.live_workers() == ["a:1", "b:1"]


def test_an_expired_lease_is_a_dead_worker_and_its_round_is_requeued(store: TaskStore) -> None:
    store.register_worker("a:1", home="a:/home", lease=EXPIRED)
    store.register_worker("b:1", home="b:/home", lease=LONG)
    _task_id, run_id = running_task(store, "a:1")
    [recovery] = store.recover_dead_workers("b:1", home="b:/home")
    assert (recovery.run_id, recovery.previous, recovery.state) == (run_id, S.RUNNING, S.QUEUED)
    assert store.get_run(run_id).state is RunState.INTERRUPTED
    # The slow worker's next renewal finds its lease gone: it must stop, not finish the run.
    assert store.renew_lease("a:1", LONG) is False
    assert store.live_workers() == ["b:1"]
    assert store.claim_next("b:1") is not None


def test_a_worker_of_the_same_home_is_dead_whatever_its_lease_says(store: TaskStore) -> None:
    # The caller holds the home's lock, which the last holder let go of only by ending.
    store.register_worker("a:1", home="a:/home", lease=LONG)
    task_id, run_id = running_task(store, "a:1")
    store.register_worker("a:2", home="a:/home", lease=LONG)
    [recovery] = store.recover_dead_workers("a:2", home="a:/home")
    assert recovery.run_id == run_id and store.get_task(task_id).state is S.QUEUED


def test_a_claim_without_a_run_is_requeued_only_when_its_claimer_is_dead(store: TaskStore) -> None:
    store.register_worker("a:1", home="a:/home", lease=LONG)
    store.register_worker("b:1", home="b:/home", lease=LONG)
    store.create_task(title="t", instruction="i", repo="/r")
    task = store.claim_next("a:1")
    assert task is not None
    assert store.recover_dead_workers("b:1", home="b:/home") == []
    assert store.get_task(task.id).state is S.PREPARING
    store.release_worker("a:1")  # gone without settling its claim (as if its lease had run out)
    [recovery] = store.recover_dead_workers("b:1", home="b:/home")
    assert (recovery.task_id, recovery.run_id, recovery.state) == (task.id, None, S.QUEUED)


def _recovered_with_a_change_after_the_look(store: TaskStore, change: Callable[[], None]) -> list[Recovery]:
    """b's recovery of dead workers, with ``change`` made by others once b has looked and before it writes."""
    write, read = store._write, store._read
    looked: list[bool] = []
    changed: list[bool] = []

    @contextlib.contextmanager
    def looking() -> Iterator[sa.Connection]:
        with read() as connection:
            yield connection
        looked.append(True)

    @contextlib.contextmanager
    def changed_after_the_look() -> Iterator[sa.Connection]:
        if looked and not changed:
            changed.append(True)
            change()
        with write() as connection:
            yield connection

    store._read, store._write = looking, changed_after_the_look  # type: ignore[method-assign]
    try:
        recoveries = store.recover_dead_workers("b:1", home="b:/home")
    finally:
        del store._read, store._write
    assert changed, "the change was never made: the recovery wrote nothing after its look"
    return recoveries


def test_a_stale_look_at_a_dead_workers_claim_does_not_queue_again_a_task_a_live_worker_claimed(
        store: TaskStore) -> None:
    """b looks for the claims of dead workers and finds a:1's; before b writes, another recovery
    queued the task again and the live c:1 claimed it, so it is preparing again, c:1's. b's write
    must leave it to c:1 (comparing the state alone, it queued c:1's task away from it)."""
    store.register_worker("b:1", home="b:/home", lease=LONG)
    store.register_worker("c:1", home="c:/home", lease=LONG)
    store.register_worker("a:1", home="a:/home", lease=EXPIRED)
    task_id = store.create_task(title="t", instruction="i", repo="/r").id
    assert store.claim_next("a:1").id == task_id  # type: ignore[union-attr]

    def taken_over() -> None:  # what another worker's recovery and c:1's claim do while b's look is in flight
        store.set_state(task_id, S.QUEUED, expected=S.PREPARING)
        assert store.claim_next("c:1").id == task_id  # type: ignore[union-attr]

    assert _recovered_with_a_change_after_the_look(store, taken_over) == []
    assert store.get_task(task_id).state is S.PREPARING and store.claimer(task_id) == "c:1"
    assert [e for e in store.events(task_id, limit=1000) if e.kind == "recovered"] == []


def test_a_stale_look_does_not_queue_again_a_task_its_claimer_claimed_again_once_it_came_back(
        store: TaskStore) -> None:
    """As above, but the claimer is the same worker: a:1 stalled past its lease, and b found it dead
    and looked for its claims. Before b writes, a:1 woke, found its lease gone, registered again
    under its own name (as LocalEngine does), queued its unheld task again and claimed it anew. The
    task is preparing and a:1's, as b saw it; but a:1 lives now, and b must leave the task to it."""
    store.register_worker("b:1", home="b:/home", lease=LONG)
    store.register_worker("a:1", home="a:/home", lease=EXPIRED)
    task_id = store.create_task(title="t", instruction="i", repo="/r").id
    assert store.claim_next("a:1").id == task_id  # type: ignore[union-attr]

    def claimed_again() -> None:
        store.register_worker("a:1", home="a:/home", lease=LONG)  # a:1 back, under its own name
        store.set_state(task_id, S.QUEUED, expected=S.PREPARING)  # its requeue_unheld
        assert store.claim_next("a:1").id == task_id  # type: ignore[union-attr]

    assert _recovered_with_a_change_after_the_look(store, claimed_again) == []
    assert store.get_task(task_id).state is S.PREPARING and store.claimer(task_id) == "a:1"


def test_a_task_whose_every_worker_dies_before_its_first_run_is_failed_not_queued_for_ever(store: TaskStore) -> None:
    """Each worker that claims it dies before a run of it begins (the task's begin kills it, say); a
    worker elsewhere queues it again each time, saying why, and the time after
    MAX_LOST_BEFORE_A_RUN of those in a row fails it instead."""
    store.register_worker("b:1", home="b:/home", lease=LONG)
    task_id = store.create_task(title="t", instruction="i", repo="/r").id
    for n in range(1, MAX_LOST_BEFORE_A_RUN + 2):
        store.register_worker(f"a:{n}", home="a:/home", lease=EXPIRED)
        assert store.claim_next(f"a:{n}").id == task_id  # type: ignore[union-attr]
        [recovery] = store.recover_dead_workers("b:1", home="b:/home")
        assert (recovery.task_id, recovery.run_id, recovery.previous) == (task_id, None, S.PREPARING)
        assert recovery.state is (S.QUEUED if n <= MAX_LOST_BEFORE_A_RUN else S.FAILED)
    assert store.get_task(task_id).state is S.FAILED and store.runs(task_id) == []
    said = [e for e in store.events(task_id, limit=1000) if e.kind == "recovered"]
    assert [e.data["reason"] for e in said] == [
        f"its worker a:{n} ended with no run of it running" for n in range(1, MAX_LOST_BEFORE_A_RUN + 1)]
    failed = Failed.last(store.events(task_id, kinds=["failed", "recovered"], limit=1000))
    assert failed == Failed(f"queued again {MAX_LOST_BEFORE_A_RUN} times after its round was lost before a run "
                            f"began; stopping: its worker a:{MAX_LOST_BEFORE_A_RUN + 1} ended with no run of it "
                            "running", "lost_before_a_run")


def test_workers_racing_for_the_queue_each_get_distinct_tasks_and_take_them_all(url: str) -> None:
    with TaskStore.open(url) as setup:
        queued = {setup.create_task(title=f"t{n}", instruction="i", repo="/r").id for n in range(24)}
    stores = [TaskStore.open(url) for _ in range(4)]
    claimed: list[list[str]] = [[] for _ in stores]
    start = threading.Barrier(len(stores))

    def claim_all(n: int) -> None:
        start.wait()
        while (task := stores[n].claim_next(f"w{n}")) is not None:
            claimed[n].append(task.id)

    threads = [threading.Thread(target=claim_all, args=(n,)) for n in range(len(stores))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    every = [task_id for ids in claimed for task_id in ids]
    assert sorted(every) == sorted(queued)  # each task once, none left queued
    assert all(stores[0].get_task(task_id).state is S.PREPARING for task_id in every)
    for store in stores:
        store.close()


def test_a_follow_up_of_a_task_failed_for_rounds_lost_before_a_run_starts_the_count_again(store: TaskStore) -> None:
    """A person's follow-up of the failed task is a fresh start as much as a retry is: its next
    round lost before a run queues it again, it does not fail it at once as the
    MAX_LOST_BEFORE_A_RUN-th loss in a row."""
    from errand.tasks.service import TaskService

    store.register_worker("b:1", home="b:/home", lease=LONG)
    task_id = store.create_task(title="t", instruction="i", repo="/r").id

    def lost_once(n: int) -> TaskState:
        store.register_worker(f"a:{n}", home="a:/home", lease=EXPIRED)
        assert store.claim_next(f"a:{n}").id == task_id  # type: ignore[union-attr]
        [recovery] = store.recover_dead_workers("b:1", home="b:/home")
        return recovery.state

    states = [lost_once(n) for n in range(1, MAX_LOST_BEFORE_A_RUN + 2)]
    assert states == [S.QUEUED] * MAX_LOST_BEFORE_A_RUN + [S.FAILED]
    TaskService(store).followup(task_id, "try once more")
    assert store.get_task(task_id).state is S.QUEUED
    assert lost_once(MAX_LOST_BEFORE_A_RUN + 2) is S.QUEUED


def test_rounds_lost_before_a_run_count_alike_whoever_queues_the_task_again(store: TaskStore) -> None:
    """A worker's recovery of dead workers and the reconciler (`errand serve`'s, `errand recover`,
    `errand worker stop`) requeue the same loss, a task claimed by a dead worker with no run begun:
    one that the reconciler requeued must count in the row, not start it again."""
    store.register_worker("b:1", home="b:/home", lease=LONG)
    task_id = store.create_task(title="t", instruction="i", repo="/r").id
    healer = Reconciler(store, grace=0.0)

    def lost_once(n: int) -> TaskState:
        store.register_worker(f"a:{n}", home="a:/home", lease=EXPIRED)
        assert store.claim_next(f"a:{n}").id == task_id  # type: ignore[union-attr]
        if n % 2:
            store.recover_dead_workers("b:1", home="b:/home")
        else:
            [healed] = asyncio.run(healer.once([task_id]))
            assert healed.task_id == task_id
        return store.get_task(task_id).state

    states = [lost_once(n) for n in range(1, MAX_LOST_BEFORE_A_RUN + 2)]
    assert states == [S.QUEUED] * MAX_LOST_BEFORE_A_RUN + [S.FAILED]
    failed = Failed.last(store.events(task_id, kinds=["failed", "recovered"], limit=1000))
    assert failed is not None and failed.code == "lost_before_a_run"
