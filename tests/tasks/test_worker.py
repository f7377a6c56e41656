"""The Temporal engine's round workers as the workflow needs them: every activity the workflow can
schedule served on its queue, a round's on the round workers', the store-only ones by ``errand
serve`` alone; a round lost here ended here alone."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
from temporalio import activity
from temporalio.exceptions import ApplicationError

from errand.tasks.engines.temporal import TemporalSettings, conductor, worker
from errand.tasks.engines.temporal import workflow as workflow_module
from errand.tasks.errors import RunNotRunning
from errand.tasks.store.tasks import TaskStore


def test_the_worker_serves_every_activity_the_workflow_schedules_old_shapes_included(tmp_path: Path) -> None:
    # A workflow begun under an older shape of the round replays and then asks for its old
    # activities (errand.begin, errand.prepare): a worker without them would leave it waiting for ever.
    source = Path(workflow_module.__file__).read_text()
    scheduled = set(re.findall(r'"(errand\.[a-z_]+)"', source))
    with TaskStore.open(f"sqlite:///{tmp_path / 'errand.db'}") as store:
        settings = TemporalSettings("127.0.0.1:9")
        served = worker.TemporalWorker(store, settings, memory=None).activities()
        assert settings.tasks_queue not in served  # a round worker that stalls holds no workflow's step
        served[settings.tasks_queue] = conductor.Conductor(store, settings).activities()
    names = {queue: {activity._Definition.must_from_callable(fn).name for fn in fns} for queue, fns in served.items()}
    assert scheduled <= set().union(*names.values()), scheduled - set().union(*names.values())
    assert names["errand-begin"] == {"errand.start", "errand.begin"}  # where only a worker with room takes them
    assert names["errand-tasks"] == {"errand.settle", "errand.lives", "errand.begun"}  # store-only: errand serve


async def test_a_round_taken_from_a_stalled_worker_ends_here_and_the_tasks_next_round_runs_on(tmp_path: Path) -> None:
    """The worker stalled past its lease in round 1: the task was requeued, and on waking the worker
    took round 2's start while round 1's attempt went on to its next write. That write is fenced;
    round 1 ends here. Round 2 keeps its place and its attempt (all the task's rounds held here ended
    before, round 2 with them)."""
    with TaskStore.open(f"sqlite:///{tmp_path / 'errand.db'}") as store:
        task = store.create_task(title="t", instruction="i", repo=str(tmp_path))
        held = worker.TemporalWorker(store, TemporalSettings("127.0.0.1:9"), memory=None)
        lost, next_round = f"{task.id}/1", f"{task.id}/2"
        round_two = asyncio.get_running_loop().create_future()
        held._held.update({lost, next_round})
        held._attempts[(next_round, 0)] = round_two

        async def fenced() -> None:
            raise RunNotRunning(f"run {task.id}-r1 was taken from this worker")

        with pytest.raises(ApplicationError) as ended:
            await held._guarded(task.id, (f"{task.id}-r1",), fenced, key=lost)
        assert ended.value.type == worker.RUN_LOST
        assert held._held == {next_round} and not round_two.cancelled()
        assert held._attempts == {(next_round, 0): round_two}
        round_two.cancel()
