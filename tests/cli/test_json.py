"""The task commands' ``--json``: one JSON object on stdout, with the HTTP API's field names, for scripts."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import forkserver
from cli.test_tasks import SCRIPT
from engine.harness import git, make_repo
from errand.tasks.records import Event, Review, Task
from errand.tasks.service import Accepted

pytestmark = pytest.mark.slow

TASK_FIELDS = {field.name for field in dataclasses.fields(Task)}  # what POST /api/tasks returns


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "ERRAND_DATABASE_URL"}
    return {**env, "ERRAND_HOME": str(home), "COLUMNS": "80"}


def errand_json(home: Path, *args: str) -> Any:
    """Run ``errand ARGS`` and read its stdout as exactly one JSON document."""
    ran = forkserver.run([*args], timeout=180, env=_env(home))
    assert ran.returncode == 0, ran.stderr
    return json.loads(ran.stdout)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "project")


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "fix.json"
    path.write_text(json.dumps(SCRIPT))
    return path


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[Path]:
    """An errand home with a worker of this test's own, stopped (by its pid) after."""
    home = tmp_path / "home"
    home.mkdir()
    process = forkserver.start(["worker"], env=_env(home), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    yield home
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=60)


def test_run_and_accept_print_what_a_script_needs(worker: Path, project: Path, script: Path,
                                                  tmp_path: Path) -> None:
    task = errand_json(worker, "run", "Make test_calc.py pass", "--repo", str(project), "--model",
                       f"scripted:{script}", "--no-worker", "--json", "-f")
    assert set(task) == TASK_FIELDS
    assert task["state"] == "ready_for_review"  # -f: printed once the task settled
    assert task["repo"] == str(project) and task["model"] == f"scripted:{script}"
    assert task["base_commit"] == git(project, "rev-parse", "HEAD").strip()

    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    git(project, "remote", "add", "origin", str(remote))
    accepted = errand_json(worker, "accept", task["id"], "--json")
    assert {field.name for field in dataclasses.fields(Accepted)} | {"repo", "next"} == set(accepted)
    assert accepted["task_id"] == task["id"] and accepted["branch"] == task["branch"]
    assert accepted["commit"] == git(project, "rev-parse", task["branch"]).strip()
    assert accepted["repo"] == str(project)
    # The next steps it prints are commands that work as they stand.
    subprocess.run(accepted["next"]["push"], shell=True, check=True, capture_output=True)
    assert git(remote, "rev-parse", task["branch"]).strip() == accepted["commit"]
    subprocess.run(accepted["next"]["switch"], shell=True, check=True, capture_output=True)
    assert git(project, "rev-parse", "--abbrev-ref", "HEAD").strip() == task["branch"]

    events = forkserver.run(["logs", task["id"], "--json"], check=True, env=_env(worker)).stdout.splitlines()
    parsed = [json.loads(line) for line in events]
    assert all(set(event) == {field.name for field in dataclasses.fields(Event)} for event in parsed)
    assert [e["kind"] for e in parsed][-1] == "accepted"


def test_a_queued_task_is_messaged_and_cancelled_in_json(tmp_path: Path, project: Path, script: Path) -> None:
    home = tmp_path / "home"  # no worker: the task stays queued
    task = errand_json(home, "run", "Make test_calc.py pass", "--repo", str(project), "--model",
                       f"scripted:{script}", "--no-worker", "--json")
    assert set(task) == TASK_FIELDS and task["state"] == "queued"
    posted = errand_json(home, "message", task["id"], "use the stdlib only", "--json")
    assert set(posted) == {"event_id"} and isinstance(posted["event_id"], int)  # POST .../message's PostedOut
    cancelled = errand_json(home, "cancel", task["id"], "--yes", "--json")
    assert set(cancelled) == TASK_FIELDS and cancelled["state"] == "cancelled"


def test_reject_prints_the_review(worker: Path, project: Path, script: Path) -> None:
    task = errand_json(worker, "run", "Make test_calc.py pass", "--repo", str(project), "--model",
                       f"scripted:{script}", "--no-worker", "--json", "-f")
    review = errand_json(worker, "reject", task["id"], "--reason", "not this way", "--json")
    assert set(review) == {field.name for field in dataclasses.fields(Review)}
    assert review["verdict"] == "rejected" and review["reason"] == "not this way"
