"""A round's start held by a worker that stalled with room (SIGSTOP while its poll of the begin
queue was open), run when it wakes: the workflow gave the start up meanwhile, and the task moved on
(claimed again and run by another worker, finished, cancelled). The late start is fenced by the
claim it was issued for: it records no run and no event, fails nothing, and says why on its worker.

The activities run as their workers run them (``ActivityEnvironment``), with the store's claims made
as the dispatcher makes them and the round given up as the workflow gives it up (``errand.settle``)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from errand.errors import SandboxNotFound
from errand.sandbox import AsyncSandbox
from errand.tasks.engines.temporal import TemporalSettings
from errand.tasks.engines.temporal.conductor import Conductor
from errand.tasks.engines.temporal.outbox import Outbox
from errand.tasks.engines.temporal.worker import TemporalWorker
from errand.tasks.engines.temporal.workflow import CONCLUDED, RUN_LOST, START_STALE, AttemptInput, SettleInput
from errand.tasks.lifecycle import TaskState
from errand.tasks.records import RunState, Task
from errand.tasks.round import steps
from errand.tasks.service import TaskService
from errand.tasks.store import claims
from errand.tasks.store.tasks import TaskStore
from postgres import DATABASES, database_url

from .cli import script
from .harness import FIX_SCRIPT

pytestmark = [pytest.mark.faults]
S = TaskState
SERVE = "temporal:serve-host:1"  # the dispatcher that claims the task's rounds
SETTINGS = TemporalSettings("127.0.0.1:9", heartbeat=10.0)
GIVEN_UP = "the worker running errand.start stopped answering (heartbeat)"


@pytest.fixture(params=DATABASES)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[TaskStore]:
    """The store on each database: the fence's checks lock the task's row on PostgreSQL."""
    with TaskStore.open(database_url(request, tmp_path)) as opened:
        yield opened
        for info in await AsyncSandbox.list():
            if info.labels.get("task") in {task.id for task in opened.list_tasks(limit=100)}:
                with contextlib.suppress(SandboxNotFound):  # it ended meanwhile
                    await (await AsyncSandbox.from_id(info.id)).terminate()
        for task in opened.list_tasks(limit=100):
            for run in opened.runs(task.id):
                steps.remove_work(run)


def _worker(store: TaskStore) -> TemporalWorker:
    return TemporalWorker(store, SETTINGS, concurrency=1, memory=None)


async def _refused(worker: TemporalWorker, task: Task, *claim: int) -> ApplicationError:
    """The worker's start of ``task``'s round (for ``claim``), expected to begin nothing."""
    with pytest.raises(ApplicationError) as refused:
        await ActivityEnvironment().run(worker.start, task.id, *claim)
    assert refused.value.type == START_STALE, repr(refused.value)
    assert worker.held() == set()  # its place is free for a round that is wanted
    return refused.value


async def test_a_start_woken_after_its_round_was_given_up_begins_nothing_while_the_task_runs_on(
        tmp_path: Path, repo: Path, store: TaskStore) -> None:
    """The red team's case: the stalled worker's start is given up, the task is claimed again and
    run by the other worker; the woken worker's start then recorded a run of "round 2" and failed
    the task ("task … is ready_for_review, not preparing; another writer changed it"), and one still
    running on the other worker too."""
    task = TaskService(store).submit("Make test_calc.py pass", repo=repo,
                                     model=script(tmp_path / "script.json", FIX_SCRIPT))
    outbox = Outbox(store)
    claimed = outbox.claim(SERVE)
    assert claimed is not None
    held = claimed[1]  # the start the stalled worker's open poll took
    # Its heartbeats ran out: the workflow gives the round up, and the task is queued again ...
    await ActivityEnvironment().run(Conductor(store, SETTINGS).settle,
                                    SettleInput(task.id, (), "interrupted", GIVEN_UP))
    assert store.get_task(task.id).state is S.QUEUED
    again = outbox.claim(SERVE)  # ... claimed again, and started on the live worker
    assert again is not None and again[1].id != held.id
    live, stalled = _worker(store), _worker(store)
    prepared = await ActivityEnvironment().run(live.start, task.id, again[1].id)
    assert store.get_task(task.id).state is S.RUNNING
    before = store.last_event_id()

    await _refused(stalled, task, held.id)  # the stalled worker wakes while the round runs
    assert store.get_task(task.id).state is S.RUNNING
    assert [run.id for run in store.runs(task.id)] == list(prepared.run_ids)
    assert store.events(task.id, before) == []

    ended = await ActivityEnvironment().run(live.attempt, AttemptInput(prepared, 0))
    assert ended.status == CONCLUDED
    assert store.get_task(task.id).state is S.READY_FOR_REVIEW
    finished = store.last_event_id()
    await _refused(stalled, task, held.id)  # ... or once the round has finished
    assert store.get_task(task.id).state is S.READY_FOR_REVIEW, store.events(task.id, finished)
    [run] = store.runs(task.id)
    assert run.id == prepared.run_ids[0] and run.state is RunState.SUCCEEDED
    assert store.events(task.id, finished) == []


async def test_a_start_woken_after_its_task_was_cancelled_begins_nothing(
        tmp_path: Path, repo: Path, store: TaskStore) -> None:
    """A person cancelled the task while the start waited in the stalled worker: on waking it began
    the round anyway ("round 1 started" after "cancelled"). Fenced by the task's state alone, so a
    start without a claim (a workflow from before claims) begins nothing either."""
    task = TaskService(store).submit("Make test_calc.py pass", repo=repo,
                                     model=script(tmp_path / "script.json", FIX_SCRIPT))
    claimed = Outbox(store).claim(SERVE)
    assert claimed is not None
    TaskService(store).cancel(task.id)
    cancelled = store.last_event_id()
    stalled = _worker(store)
    refused = await _refused(stalled, task, claimed[1].id)
    assert "cancelled" in str(refused)
    await _refused(stalled, task)
    assert store.get_task(task.id).state is S.CANCELLED
    assert store.runs(task.id) == [] and store.events(task.id, cancelled) == []


async def test_a_start_woken_while_the_task_waits_for_its_next_start_leaves_that_start_the_round(
        tmp_path: Path, repo: Path, store: TaskStore) -> None:
    """Both workers stalled: the task was given up and claimed again, and its new start waits for a
    worker with room. A woken worker's old start began a round no workflow drove (its run and task
    ``running`` for good, its place taken, so the new start was never taken): it begins nothing now,
    and the new start, taken next, begins the round."""
    task = TaskService(store).submit("Make test_calc.py pass", repo=repo,
                                     model=script(tmp_path / "script.json", FIX_SCRIPT))
    outbox = Outbox(store)
    claimed = outbox.claim(SERVE)
    assert claimed is not None
    await ActivityEnvironment().run(Conductor(store, SETTINGS).settle,
                                    SettleInput(task.id, (), "interrupted", GIVEN_UP))
    again = outbox.claim(SERVE)
    assert again is not None
    waiting = store.last_event_id()
    woken = _worker(store)
    await _refused(woken, task, claimed[1].id)
    assert store.get_task(task.id).state is S.PREPARING
    assert store.runs(task.id) == [] and store.events(task.id, waiting) == []
    prepared = await ActivityEnvironment().run(woken.start, task.id, again[1].id)
    assert store.get_task(task.id).state is S.RUNNING
    assert [run.round for run in store.runs(task.id)] == [1] and len(prepared.run_ids) == 1
    await ActivityEnvironment().run(woken.close, prepared.key, list(prepared.run_ids))


async def test_a_round_given_up_while_its_late_start_begins_has_the_runs_it_began_interrupted(
        tmp_path: Path, repo: Path, store: TaskStore) -> None:
    """The start woke just before the workflow gave it up: it began its runs under the claim it
    was for. Settling then queues the task again only with none of its runs running: the runs
    the late start began are interrupted (its worker ends them), not left running beside the next
    round's."""
    task = TaskService(store).submit("Make test_calc.py pass", repo=repo,
                                     model=script(tmp_path / "script.json", FIX_SCRIPT))
    claimed = Outbox(store).claim(SERVE)
    assert claimed is not None
    [run] = claims.begin_round(store, task.id, "a-stalled-worker", 1, claim=claimed[1].id)
    await ActivityEnvironment().run(Conductor(store, SETTINGS).settle,
                                    SettleInput(task.id, (), "interrupted", GIVEN_UP))
    assert store.get_run(run.id).state is RunState.INTERRUPTED
    assert store.get_task(task.id).state is S.QUEUED


async def test_a_late_start_whose_round_is_given_up_while_it_prepares_moves_nothing_and_ends_what_it_made(
        tmp_path: Path, repo: Path, store: TaskStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """The start woke just before it was given up, and began its round; the workflow then gave it up
    (its runs interrupted, the task queued) and the dispatcher claimed the task again, all while the
    late start prepared. Its move to ``running`` took the task from under the next round's start
    (which then found it not ``preparing``): now it moves nothing, and ends its sandbox and copy."""
    task = TaskService(store).submit("Make test_calc.py pass", repo=repo,
                                     model=script(tmp_path / "script.json", FIX_SCRIPT))
    outbox = Outbox(store)
    claimed = outbox.claim(SERVE)
    assert claimed is not None
    claimed_again: list[int] = []
    start_sandbox = steps.start_sandbox

    async def given_up_meanwhile(*args: Any, **kwargs: Any) -> AsyncSandbox:
        sandbox = await start_sandbox(*args, **kwargs)
        if (kwargs.get("labels") or {}).get("role") != "agent":  # the baseline's sandbox
            return sandbox
        await ActivityEnvironment().run(Conductor(store, SETTINGS).settle,
                                        SettleInput(task.id, (), "interrupted", GIVEN_UP))
        again = outbox.claim(SERVE)
        assert again is not None
        claimed_again.append(again[1].id)
        return sandbox

    monkeypatch.setattr(steps, "start_sandbox", given_up_meanwhile)
    monkeypatch.setenv("ERRAND_CACHE_DIR", str(tmp_path / "cache"))  # its baseline runs (in a sandbox) meanwhile
    late = _worker(store)
    with pytest.raises(ApplicationError) as lost:
        await ActivityEnvironment().run(late.start, task.id, claimed[1].id)
    assert lost.value.type == RUN_LOST, repr(lost.value)
    [run] = store.runs(task.id)
    assert run.state is RunState.INTERRUPTED
    assert store.get_task(task.id).state is S.PREPARING  # still the next start's to begin
    left = [info.labels for info in await AsyncSandbox.list() if info.labels.get("task") == task.id]
    assert left == [] and not steps.work_dir_of(run.id).exists() and late.held() == set()
    monkeypatch.setattr(steps, "start_sandbox", start_sandbox)
    prepared = await ActivityEnvironment().run(late.start, task.id, claimed_again[0])
    assert prepared.round == 2 and store.get_task(task.id).state is S.RUNNING
    await ActivityEnvironment().run(late.close, prepared.key, list(prepared.run_ids))
