"""Workflows begun under an older errand survive an upgrade: every recorded history in
``histories/`` (a fix, a question answered, best of two, a cancel — recorded by
``histories/record.py`` under each shape the workflow has had) replays on today's workflow
code without a nondeterminism error. A change to ``workflow.py`` that reorders or renames
what a running workflow already did fails here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from errand.tasks.engines.temporal.conductor import WORKFLOW_RUNNER
from errand.tasks.engines.temporal.workflow import TaskWorkflow

HISTORIES = sorted((Path(__file__).parent / "histories").glob("*.json"))


def test_every_shape_of_the_workflow_has_recorded_histories() -> None:
    shapes = {path.name.split("-")[0] for path in HISTORIES}
    assert {"v1", "v2"} <= shapes
    for shape in shapes:
        assert {p.name.removeprefix(f"{shape}-") for p in HISTORIES if p.name.startswith(f"{shape}-")} == {
            "fixed.json", "asked.json", "best-of-two.json", "cancelled.json"}


@pytest.mark.parametrize("path", HISTORIES, ids=[path.stem for path in HISTORIES])
async def test_a_recorded_workflow_replays_on_todays_code(path: Path) -> None:
    history = WorkflowHistory.from_json(f"errand-task-{path.stem}", json.loads(path.read_text()))
    replayer = Replayer(workflows=[TaskWorkflow], workflow_runner=WORKFLOW_RUNNER)
    await replayer.replay_workflow(history)  # raises on a nondeterminism error
