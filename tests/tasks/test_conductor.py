"""The workflow sandbox of ``errand serve``'s workflows worker: the workflow's own module imported
into it afresh and held to its rules; the layers below it — the sandbox package, the errors — from
the process's own modules, since importing them anew cost ~50 ms of CPU a task (the store's, ~300 ms)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import pytest
from temporalio import workflow
from temporalio.worker.workflow_sandbox import RestrictedWorkflowAccessError, _importer

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


async def test_only_the_workflows_module_and_its_packages_are_imported_afresh(monkeypatch: pytest.MonkeyPatch) -> None:
    # A package above the workflow's module that imported the store (and with it SQLAlchemy and
    # Alembic) made each workflow's start cost ~300 ms of CPU, unseen, after a package move.
    importers: list[_importer.Importer] = []
    made = _importer.Importer.__init__

    def recording(self: _importer.Importer, *args: Any, **kwargs: Any) -> None:
        made(self, *args, **kwargs)
        importers.append(self)

    monkeypatch.setattr(_importer.Importer, "__init__", recording)
    conductor.WORKFLOW_RUNNER.prepare_workflow(workflow._Definition.must_from_class(TaskWorkflow))
    parts = MODULE.split(".")
    packages = {".".join(parts[:end]) for end in range(1, len(parts) + 1)}
    fresh = {name for importer in importers for name, module in importer.new_modules.items()
             if name.split(".")[0] == "errand" and sys.modules.get(name) is not module}
    assert importers and MODULE in fresh
    assert fresh <= packages, f"imported afresh in each workflow's sandbox: {sorted(fresh - packages)}"
