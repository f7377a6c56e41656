"""The workflow sandbox of ``errand serve``'s workflows worker: the workflow's own module imported
into it afresh and held to its rules; the layers below it — the sandbox package, the errors — from
the process's own modules, since importing them anew cost ~50 ms of CPU a task."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
from temporalio import workflow
from temporalio.worker.workflow_sandbox import RestrictedWorkflowAccessError

from errand.tasks.engines.temporal import conductor
from errand.tasks.engines.temporal.workflow import TaskWorkflow

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
