"""An instance as the task layer sees it while it is graded or solved: its task and run records, its
environment and set-up, and the base tree, which says which of the instance's test files exist
before any patch (none known: every one is run)."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import pytest

from errand.eval.context import InstanceContext
from errand.eval.dataset import Instance, load_dataset
from errand.eval.solve import confidence_command
from errand.sandbox import Image
from errand.tasks.lifecycle import TaskState
from errand.tasks.records import Run, RunState, Task
from errand.tasks.round import steps
from eval.shapes import SPECS, swe_record


def instance(tmp_path: Path) -> Instance:
    record = swe_record(PASS_TO_PASS=["tests/test_c.py::test_old"])
    (tmp_path / "data.jsonl").write_text(json.dumps(record) + "\n")
    (tmp_path / "specs.toml").write_text(SPECS)
    return load_dataset(tmp_path / "data.jsonl", specs=tmp_path / "specs.toml").instances[0]


def context(given: Instance, base_tree: Path | None) -> InstanceContext:
    now = time.time()
    task = Task(id="eval-acme", title=given.instance_id, instruction=given.problem_statement, repo=given.source,
                base_ref=given.base_commit, base_commit=given.base_commit, model=None, model_endpoint=None,
                attempts=1, state=TaskState.RUNNING, branch=None, parent_id=None, created_at=now, updated_at=now)
    run = Run(id="eval-agent-1", task_id=task.id, attempt=1, round=1, state=RunState.RUNNING, worker="eval",
              started_at=now, ended_at=None, result=None)
    return InstanceContext(task, run, given.spec.environment(), steps.SetUp(Image.base(), "key"), 1.5, base_tree)


def test_without_a_base_tree_every_test_file_of_the_instance_is_run(tmp_path: Path) -> None:
    given = instance(tmp_path)
    made = context(given, None)
    assert made.base_tree is None and made.task.base_commit == given.base_commit
    command = confidence_command(given, made)
    assert command.startswith("pytest -q --junitxml=")
    assert command.endswith("tests/test_a.py tests/test_b.py tests/test_c.py")


def test_with_a_base_tree_only_the_test_files_it_holds_are_run(tmp_path: Path) -> None:
    given = instance(tmp_path)
    base = tmp_path / "base"
    (base / "tests").mkdir(parents=True)
    (base / "tests" / "test_a.py").write_text("")
    (base / "tests" / "test_c.py").write_text("")  # test_b.py is one the test patch adds
    assert confidence_command(given, context(given, base)).endswith("tests/test_a.py tests/test_c.py")


def test_the_context_is_a_value_that_cannot_change(tmp_path: Path) -> None:
    made = context(instance(tmp_path), None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.base_tree = tmp_path  # type: ignore[misc]
