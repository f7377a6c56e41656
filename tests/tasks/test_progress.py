"""A task's figures (elapsed, steps, tokens, cost, budgets left) as every face shows them."""

from __future__ import annotations

from errand.tasks.lifecycle import TaskState
from errand.tasks.progress import progress
from errand.tasks.records import RunState
from errand.tasks.store.tasks import TaskStore


def _model(store: TaskStore, task_id: str, run_id: str, cost: float | None, cached: int = 0) -> None:
    store.append_event(task_id, run_id, "model", {"input_tokens": 1000, "output_tokens": 50, "cost": cost,
                                                  "cache_read_tokens": cached})


def test_a_running_round_sums_its_model_events_per_attempt_against_the_budgets(store: TaskStore) -> None:
    task = store.create_task(title="t", instruction="do it", repo="/r", attempts=2)
    store.append_event(task.id, None, "environment", {"budgets": {"max_steps": 10, "max_tokens": 5000,
                                                                  "max_cost": 1.0, "max_seconds": None}})
    first, second = store.start_run(task.id, "w", round=1), store.start_run(task.id, "w", round=1)
    _model(store, task.id, first.id, 0.01, cached=800)
    _model(store, task.id, first.id, 0.02)
    _model(store, task.id, second.id, None)  # a provider that names no price
    figures = progress(store, store.get_task(task.id))
    assert (figures.usage.steps, figures.usage.tokens, figures.usage.cached_tokens) == (3, 3150, 800)
    assert round(figures.usage.cost, 6) == 0.03 and not figures.usage.cost_known
    assert [(a.attempt, a.usage.steps) for a in figures.attempts] == [(1, 2), (2, 1)]
    left = figures.left()  # what the most-used attempt has left
    assert left["max_steps"] == 8 and left["max_tokens"] == 5000 - 2100 and left["max_seconds"] is None
    assert round(left["max_cost"] or 0, 6) == 0.97
    assert figures.ended_at is None and figures.to_json()["usage"]["tokens"] == 3150


def test_an_ended_run_is_counted_by_its_own_account_which_includes_condensing(store: TaskStore) -> None:
    task = store.create_task(title="t", instruction="do it", repo="/r")
    run = store.start_run(task.id, "w", round=1)
    _model(store, task.id, run.id, 0.01)
    spent = {"steps": 2, "input_tokens": 1800, "output_tokens": 90, "cache_read_tokens": 0, "cost": 0.015,
             "unpriced_calls": 0, "seconds": 4.5}
    store.finish_run(run.id, RunState.SUCCEEDED, {"spent": spent, "rank": 1})
    store.set_state(task.id, TaskState.PREPARING)
    store.set_state(task.id, TaskState.FAILED)
    figures = progress(store, store.get_task(task.id))
    assert (figures.usage.steps, figures.usage.tokens, figures.usage.cost, figures.usage.cost_known) == (
        2, 1890, 0.015, True)
    assert figures.attempts[0].seconds == 4.5 and figures.ended_at is not None


def test_the_clock_stops_while_a_task_waits_for_review(store: TaskStore) -> None:
    task = store.create_task(title="t", instruction="do it", repo="/r")
    for state in (TaskState.PREPARING, TaskState.RUNNING):
        store.set_state(task.id, state)
    assert progress(store, store.get_task(task.id)).ended_at is None  # still working: it counts on
    ready = store.set_state(task.id, TaskState.READY_FOR_REVIEW)
    figures = progress(store, ready)
    assert figures.ended_at == ready.updated_at and figures.seconds == ready.updated_at - ready.created_at
