"""The Temporal worker as the workflow needs it: its workflow sandbox (the workflow's own module
imported into it afresh and held to its rules; the layers below it — the sandbox package, the
errors — from the worker's own modules, since importing them anew cost ~50 ms of CPU a task), and
every activity the workflow can schedule served on its queue."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest
from temporalio import activity, workflow
from temporalio.worker.workflow_sandbox import RestrictedWorkflowAccessError

from errand.tasks.engines.temporal import TemporalSettings, worker
from errand.tasks.engines.temporal import workflow as workflow_module
from errand.tasks.engines.temporal.workflow import TaskWorkflow
from errand.tasks.store.tasks import TaskStore

MODULE = TaskWorkflow.__module__


def _passed_through(name: str) -> bool:
    passthrough = worker.WORKFLOW_RUNNER.restrictions.passthrough_modules
    parts = name.split(".")
    return any(".".join(parts[:end]) in passthrough for end in range(1, len(parts) + 1))


def test_the_workflow_module_is_not_passed_through_but_the_sandbox_layer_is() -> None:
    assert MODULE == "errand.tasks.engines.temporal.workflow"
    assert not _passed_through(MODULE) and not _passed_through("errand")
    assert _passed_through("errand.sandbox._backends.launcher") and _passed_through("errand.errors")


async def test_the_workflow_is_prepared_in_the_sandbox_and_a_module_making_a_directory_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    worker.WORKFLOW_RUNNER.prepare_workflow(workflow._Definition.must_from_class(TaskWorkflow))
    (tmp_path / "directory_making_workflow.py").write_text(
        "import os, tempfile\nfrom temporalio import workflow\n"
        "SCRATCH = tempfile.mkdtemp(dir=os.path.dirname(__file__))\n\n"
        "@workflow.defn\nclass Reads:\n    @workflow.run\n    async def run(self) -> None:\n        pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    probe = importlib.import_module("directory_making_workflow")  # on the host it imports: no rules there
    with pytest.raises(RestrictedWorkflowAccessError, match=r"tempfile\.mkdtemp"):
        worker.WORKFLOW_RUNNER.prepare_workflow(workflow._Definition.must_from_class(probe.Reads))


def test_the_worker_serves_every_activity_the_workflow_schedules_old_shapes_included(tmp_path: Path) -> None:
    # A workflow begun under an older shape of the round replays and then asks for its old
    # activities (errand.begin, errand.prepare): a worker without them would leave it waiting for ever.
    source = Path(workflow_module.__file__).read_text()
    scheduled = set(re.findall(r'"(errand\.[a-z_]+)"', source))
    with TaskStore.open(f"sqlite:///{tmp_path / 'errand.db'}") as store:
        served = worker.TemporalWorker(store, TemporalSettings("127.0.0.1:9"), memory=None).activities()
    names = {queue: {activity._Definition.must_from_callable(fn).name for fn in fns} for queue, fns in served.items()}
    assert scheduled <= set().union(*names.values()), scheduled - set().union(*names.values())
    assert names["errand-begin"] == {"errand.start", "errand.begin"}  # where only a worker with room takes them
    assert names["errand-tasks"] == {"errand.settle", "errand.lives", "errand.begun"}  # store-only: any worker
