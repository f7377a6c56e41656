"""The fence of a round's start, on each database: a round begins only while its task is
``preparing`` (under the claim it was issued for), is queued again only with none of its runs
running, and moves its task to ``running`` only while every one of its runs is."""

from __future__ import annotations

import pytest

from errand.tasks.errors import RunNotRunning, StaleStart, StateConflict
from errand.tasks.events import Recovered
from errand.tasks.lifecycle import TaskState
from errand.tasks.records import RunState, Task
from errand.tasks.store import claims
from errand.tasks.store.tasks import MAX_LOST_BEFORE_A_RUN, TaskStore


def preparing(store: TaskStore) -> Task:
    task = store.create_task(title="t", instruction="i", repo="/r")
    return store.set_state(task.id, TaskState.PREPARING)


def test_a_round_begins_its_attempts_side_by_side_and_the_next_round_numbers_on(store: TaskStore) -> None:
    task = preparing(store)
    first = claims.begin_round(store, task.id, "w-1", 2)
    assert [(run.id, run.attempt, run.round, run.state, run.worker) for run in first] == [
        (f"{task.id}-r1", 1, 1, RunState.RUNNING, "w-1"), (f"{task.id}-r2", 2, 1, RunState.RUNNING, "w-1")]
    assert store.runs(task.id) == first
    for run in first:
        store.finish_run(run.id, RunState.FAILED, {"reason": "x"})
    [later] = claims.begin_round(store, task.id, "w-2", 1)
    assert (later.id, later.attempt, later.round) == (f"{task.id}-r3", 3, 2)


@pytest.mark.parametrize("state", [TaskState.QUEUED, TaskState.CANCELLED])
def test_a_start_for_a_task_not_preparing_begins_nothing(store: TaskStore, state: TaskState) -> None:
    task = store.create_task(title="t", instruction="i", repo="/r")
    if state is not TaskState.QUEUED:
        store.set_state(task.id, state)
    with pytest.raises(StaleStart) as caught:
        claims.begin_round(store, task.id, "w-1", 1)
    assert (caught.value.code, caught.value.task_id, caught.value.state) == ("stale_start", task.id, state.value)
    assert store.runs(task.id) == []


def test_a_start_under_another_claim_begins_nothing(store: TaskStore) -> None:
    task = preparing(store)  # claimed by the local engine: no claim on the task
    with pytest.raises(StaleStart) as caught:
        claims.begin_round(store, task.id, "w-1", 1, claim=7)
    assert "not preparing under claim 7" in caught.value.message and caught.value.claim is None
    assert store.runs(task.id) == []


def test_a_round_lost_before_it_began_is_queued_again_with_its_event(store: TaskStore) -> None:
    task = preparing(store)
    assert claims.requeue_unbegun(store, task.id, reason="lost", rule="r")
    assert store.get_task(task.id).state is TaskState.QUEUED
    [event] = store.events(task.id, kinds=["recovered"])
    assert Recovered.of(event) == Recovered("preparing", "queued", "lost", "r", last_round=0)
    assert not claims.requeue_unbegun(store, task.id, reason="again", rule="r")  # queued: not preparing
    assert len(store.events(task.id, kinds=["recovered"])) == 1


def test_a_round_with_a_run_running_is_not_queued_again(store: TaskStore) -> None:
    task = preparing(store)
    [run] = claims.begin_round(store, task.id, "w-1", 1)
    assert not claims.requeue_unbegun(store, task.id, reason="lost", rule="r")
    assert store.get_task(task.id).state is TaskState.PREPARING and store.events(task.id, kinds=["recovered"]) == []
    store.finish_run(run.id, RunState.CANCELLED)
    assert claims.requeue_unbegun(store, task.id, reason="lost", rule="r")


def test_a_round_lost_before_it_began_every_time_is_failed_once_past_the_bound(store: TaskStore) -> None:
    """The Temporal engine's requeue of a lost start (a stalled worker took it) is bounded as the
    local engine's is: queued again MAX_LOST_BEFORE_A_RUN times in a row, then failed, saying why."""
    task = preparing(store)
    for _ in range(MAX_LOST_BEFORE_A_RUN):
        assert claims.requeue_unbegun(store, task.id, reason="its start was lost", rule="r")
        assert store.get_task(task.id).state is TaskState.QUEUED
        assert store.claim_next("temporal:dispatcher") is not None
    assert claims.requeue_unbegun(store, task.id, reason="its start was lost", rule="r")
    assert store.get_task(task.id).state is TaskState.FAILED
    [failed] = store.events(task.id, kinds=["failed"])
    assert failed.data["code"] == "lost_before_a_run" and failed.data["reason"].endswith("its start was lost")


def test_a_round_runs_only_while_all_its_runs_do(store: TaskStore) -> None:
    task = preparing(store)
    runs = claims.begin_round(store, task.id, "w-1", 2)
    store.finish_run(runs[1].id, RunState.CANCELLED)
    with pytest.raises(RunNotRunning) as caught:
        claims.run_round(store, task.id, [run.id for run in runs])
    assert caught.value.code == "run_not_running" and runs[1].id in caught.value.message
    assert store.get_task(task.id).state is TaskState.PREPARING
    claims.run_round(store, task.id, [runs[0].id])
    assert store.get_task(task.id).state is TaskState.RUNNING
    with pytest.raises(StateConflict) as conflict:
        claims.run_round(store, task.id, [runs[0].id])
    assert (conflict.value.expected, conflict.value.actual) == ("preparing", "running")
