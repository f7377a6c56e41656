"""The Temporal engine's round workers as the workflow needs them: every activity the workflow can
schedule served on its queue, a round's on the round workers', the store-only ones by ``errand
serve`` alone."""

from __future__ import annotations

import re
from pathlib import Path

from temporalio import activity

from errand.tasks.engines.temporal import TemporalSettings, conductor, worker
from errand.tasks.engines.temporal import workflow as workflow_module
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
