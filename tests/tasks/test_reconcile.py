"""The reconciler's decision table, row by row (no store, no network), and its acting on a real
store: each heal is done once however many reconcilers race, and says why in the task's log."""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import replace
from pathlib import Path

import pytest

import forkserver
from errand.tasks.engines.reconcile import Action, Reconciler, Seen, WorkflowState, act, decide
from errand.tasks.errors import EnginesMixed
from errand.tasks.lifecycle import TaskState
from errand.tasks.records import Run, RunState, Task
from errand.tasks.store.tasks import MAX_LOST_BEFORE_A_RUN, TaskStore

S = TaskState
W = WorkflowState
NOW = 10_000.0


def task(state: TaskState, updated: float = NOW - 600) -> Task:
    return Task(id="t-1", title="t", instruction="i", repo="/r", base_ref="HEAD", base_commit=None, model=None,
                model_endpoint=None, attempts=1, state=state, branch=None, parent_id=None, created_at=0.0,
                updated_at=updated)


def run(worker: str, number: int = 1) -> Run:
    return Run(id=f"t-1-r{number}", task_id="t-1", attempt=number, round=1, state=RunState.RUNNING, worker=worker,
               started_at=NOW - 600, ended_at=None, result=None)


def seen(state: TaskState, *runs: Run, live: tuple[str, ...] = (), claimer: str | None = None,
         workflow: WorkflowState | None = None, updated: float = NOW - 600) -> Seen:
    return Seen(task(state, updated), runs, frozenset(live), NOW, claimer=claimer, workflow=workflow)


# -- the local engine: judged by leases --------------------------------------------------------

def test_a_run_whose_worker_holds_no_lease_is_interrupted_with_the_reason() -> None:
    heal = decide(seen(S.RUNNING, run("host:1"), live=("host:2",)))
    assert heal is not None and heal.action is Action.INTERRUPT
    assert heal.run_ids == heal.reap == ("t-1-r1",)
    assert "host:1 holds no live lease" in heal.reason


def test_a_run_whose_worker_lives_is_left_to_it() -> None:
    assert decide(seen(S.RUNNING, run("host:1"), live=("host:1",))) is None
    assert decide(seen(S.NEEDS_INPUT, run("errand-worker-x"), live=("temporal:errand-worker-x",))) is None


def test_a_task_claimed_by_a_dead_worker_before_any_run_is_requeued() -> None:
    heal = decide(seen(S.PREPARING, live=("host:2",), claimer="host:1"))
    assert heal is not None and heal.action is Action.REQUEUE and heal.previous is S.PREPARING
    assert "claimed by host:1" in heal.reason
    assert decide(seen(S.PREPARING, live=("host:1",), claimer="host:1")) is None  # it is beginning the round


def test_a_cancelled_tasks_runs_no_live_worker_holds_are_cancelled() -> None:
    heal = decide(seen(S.CANCELLED, run("host:1"), live=()))
    assert heal is not None and heal.action is Action.CANCEL_RUNS and heal.reap == ("t-1-r1",)
    assert heal.reason.startswith("the task was cancelled")
    assert decide(seen(S.CANCELLED, run("host:1"), live=("host:1",))) is None  # its worker sees the cancel


def test_a_task_that_changed_within_the_grace_is_left_alone() -> None:
    fresh = seen(S.PREPARING, live=(), claimer="host:1", updated=NOW - 5)
    assert decide(fresh, grace=10) is None
    assert decide(fresh, grace=1) is not None


def test_nothing_to_do_for_settled_or_queued_tasks() -> None:
    for state in (S.QUEUED, S.READY_FOR_REVIEW, S.FAILED, S.ACCEPTED, S.CANCELLED):
        assert decide(seen(state, live=())) is None


# -- the Temporal engine: judged by the workflow ------------------------------------------------

@pytest.mark.parametrize("workflow", [W.MISSING, W.FAILED, W.COMPLETED])
def test_a_run_whose_workflow_is_gone_is_interrupted_even_if_its_worker_lives(workflow: WorkflowState) -> None:
    heal = decide(seen(S.RUNNING, run("errand-worker-x"), live=("temporal:errand-worker-x",), workflow=workflow))
    assert heal is not None and heal.action is Action.INTERRUPT and heal.run_ids == ("t-1-r1",)
    assert heal.reap == ()  # its live worker removes its own copies
    assert "workflow" in heal.reason


def test_a_claimed_task_without_a_workflow_is_requeued() -> None:
    heal = decide(seen(S.PREPARING, live=("temporal:serve:1",), claimer="temporal:serve:1", workflow=W.MISSING))
    assert heal is not None and heal.action is Action.REQUEUE
    assert "no workflow" in heal.reason


def test_a_task_whose_hand_off_is_on_its_way_is_left_to_the_outbox() -> None:
    on_its_way = replace(seen(S.PREPARING, claimer="temporal:serve:1", workflow=W.MISSING), dispatching=True)
    assert decide(on_its_way) is None


def test_a_running_workflow_drives_its_task_whatever_the_leases_say() -> None:
    # A task waiting for an answer while its worker is away: the workflow waits for it by design.
    assert decide(seen(S.NEEDS_INPUT, run("errand-worker-x"), live=(), workflow=W.RUNNING)) is None
    assert decide(seen(S.PREPARING, live=(), claimer="temporal:gone", workflow=W.RUNNING)) is None


def test_a_cancelled_task_whose_workflow_failed_has_its_runs_cancelled() -> None:
    heal = decide(seen(S.CANCELLED, run("errand-worker-x"), live=("temporal:errand-worker-x",), workflow=W.FAILED))
    assert heal is not None and heal.action is Action.CANCEL_RUNS


# -- acting, on a real store ----------------------------------------------------------------------

def _running(store: TaskStore, worker: str) -> tuple[str, str]:
    task_id = store.create_task(title="t", instruction="i", repo="/r").id
    store.claim_next(worker)
    started = store.start_run(task_id, worker)
    store.set_state(task_id, S.RUNNING)
    return task_id, started.id


def test_acting_twice_heals_once_and_says_why(store: TaskStore) -> None:
    task_id, run_id = _running(store, "host:1")
    found = Seen(store.get_task(task_id), tuple(store.running_runs()), frozenset(store.live_workers()), time.time())
    heal = decide(found, grace=0)
    assert heal is not None
    first, second = act(store, heal), act(store, heal)
    assert first is not None and first.state is S.QUEUED and second is None
    assert store.get_run(run_id).state is RunState.INTERRUPTED
    [recovered] = store.events(task_id, kinds=["recovered"])
    assert recovered.data["reason"] == heal.reason and recovered.data["state"] == "queued"


def test_a_second_interruption_fails_the_task_with_a_reason(store: TaskStore) -> None:
    task_id, _ = _running(store, "host:1")
    assert [h.state for h in asyncio.run(Reconciler(store, grace=0).once())] == [S.QUEUED]
    store.claim_next("host:2")
    store.start_run(task_id, "host:2")
    store.set_state(task_id, S.RUNNING)
    [healed] = asyncio.run(Reconciler(store, grace=0).once())
    assert healed.state is S.FAILED
    [failed] = store.events(task_id, kinds=["failed"])
    assert "host:2 holds no live lease" in failed.data["reason"] and "errand retry" in failed.data["reason"]


def test_a_task_whose_claimer_dies_before_a_run_every_time_is_failed_once_past_the_bound(store: TaskStore) -> None:
    """`errand recover` and `errand serve`'s reconciler requeue a task claimed by a worker that died
    before any run of it began; bounded as the engines' own requeues are, it is failed once that
    happened MAX_LOST_BEFORE_A_RUN times in a row, not claimed and lost for ever."""
    task_id = store.create_task(title="t", instruction="i", repo="/r").id
    states = []
    for n in range(MAX_LOST_BEFORE_A_RUN + 1):
        assert store.claim_next(f"host:{n}") is not None  # claimed; its worker dies before a run
        [healed] = asyncio.run(Reconciler(store, grace=0).once())
        states.append(healed.state)
    assert states == [S.QUEUED] * MAX_LOST_BEFORE_A_RUN + [S.FAILED]
    [failed] = store.events(task_id, kinds=["failed"])
    assert failed.data["code"] == "lost_before_a_run" and f"host:{MAX_LOST_BEFORE_A_RUN}" in failed.data["reason"]


def test_the_local_rule_refuses_a_store_the_temporal_engine_serves(store: TaskStore) -> None:
    _running(store, "errand-worker-x")
    store.register_worker("temporal:serve:1", home="temporal", lease=60)
    with pytest.raises(EnginesMixed):
        asyncio.run(Reconciler(store, grace=0).once())
    assert store.running_runs()  # nothing was changed


def test_errand_recover_refuses_an_unknown_engine_and_changes_nothing(tmp_path: Path) -> None:

    env = {**os.environ, "ERRAND_HOME": str(tmp_path / "home"), "ERRAND_DATABASE_URL": f"sqlite:///{tmp_path}/e.db"}
    with TaskStore.open(env["ERRAND_DATABASE_URL"]) as store:
        task_id, _ = _running(store, "host:1")
    ran = forkserver.run(["recover", "--engine", "nope", "--grace", "0"], env=env, timeout=120)
    assert ran.returncode != 0 and "unknown engine 'nope'" in ran.stderr
    with TaskStore.open(env["ERRAND_DATABASE_URL"]) as store:
        assert store.get_task(task_id).state is S.RUNNING and store.running_runs()


def test_a_settled_tasks_left_running_run_is_ended_and_the_task_stays_as_it_is(store: TaskStore) -> None:
    """A task failed already, its run left ``running`` by a worker that is gone: the run ends, and
    nothing says the task went ``failed → failed`` or was failed again for a second interruption."""
    task_id, run_id = _running(store, "host:1")
    store.set_state(task_id, S.FAILED, event=("failed", {"reason": "the tests did not pass", "code": "x"}))
    [healed] = asyncio.run(Reconciler(store, grace=0).once())
    assert healed.action is Action.END_RUNS and healed.state is healed.previous is S.FAILED
    assert healed.change() == f"stays failed; run {run_id} ended"
    assert store.get_run(run_id).state is RunState.INTERRUPTED
    assert [e.data["reason"] for e in store.events(task_id, kinds=["failed"])] == ["the tests did not pass"]
    [recovered] = store.events(task_id, kinds=["recovered"])
    assert recovered.data["reason"].startswith("the task is failed already and its worker host:1 holds no live lease")
    assert asyncio.run(Reconciler(store, grace=0).once()) == []
