"""The Temporal engine's workers as the workflow needs them: the workflow sandbox of ``errand
serve``'s workflows worker (the workflow's own module imported into it afresh and held to its rules;
the layers below it — the sandbox package, the errors — from the process's own modules, since
importing them anew cost ~50 ms of CPU a task), and every activity the workflow can schedule served
on its queue: a round's on the round workers', the store-only ones by ``errand serve`` alone."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest
from temporalio import activity, workflow
from temporalio.worker.workflow_sandbox import RestrictedWorkflowAccessError

from errand.tasks.engines.temporal import TemporalSettings, conductor, worker
from errand.tasks.engines.temporal import workflow as workflow_module
from errand.tasks.engines.temporal.workflow import TaskWorkflow
from errand.tasks.store.tasks import TaskStore

MODULE = TaskWorkflow.__module__


def _passed_through(name: str) -> bool:
    passthrough = conductor.WORKFLOW_RUNNER.restrictions.passthrough_modules
    parts = name.split(".")
    return any(".".join(parts[:end]) in passthrough for end in range(1, len(parts) + 1))


def test_the_workflow_module_is_not_passed_through_but_the_sandbox_layer_is() -> None:
    assert MODULE == "errand.tasks.engines.temporal.workflow"
    assert not _passed_through(MODULE) and not _passed_through("errand")
    assert _passed_through("errand.sandbox._backends.launcher") and _passed_through("errand.errors")


async def test_the_workflow_is_prepared_in_the_sandbox_and_a_module_making_a_directory_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    conductor.WORKFLOW_RUNNER.prepare_workflow(workflow._Definition.must_from_class(TaskWorkflow))
    (tmp_path / "directory_making_workflow.py").write_text(
        "import os, tempfile\nfrom temporalio import workflow\n"
        "SCRATCH = tempfile.mkdtemp(dir=os.path.dirname(__file__))\n\n"
        "@workflow.defn\nclass Reads:\n    @workflow.run\n    async def run(self) -> None:\n        pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    probe = importlib.import_module("directory_making_workflow")  # on the host it imports: no rules there
    with pytest.raises(RestrictedWorkflowAccessError, match=r"tempfile\.mkdtemp"):
        conductor.WORKFLOW_RUNNER.prepare_workflow(workflow._Definition.must_from_class(probe.Reads))


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
