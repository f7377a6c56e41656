"""What a person can do with a task in each state, through ``errand``: retry a failed task,
follow up wherever the README says so, and a sentence that says what to do instead
whenever an action does not fit."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import forkserver
from cli.test_tasks import SCRIPT
from engine.cli import errand, errand_json
from engine.harness import git, make_repo


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "fix.json"
    path.write_text(json.dumps(SCRIPT))
    return path


@contextmanager
def worker(home: Path) -> Iterator[None]:
    """A worker of ``home`` of the test's own, started now and stopped after."""
    environment = {**os.environ, "ERRAND_HOME": str(home)}
    environment.pop("ERRAND_DATABASE_URL", None)
    process = forkserver.start(["worker"], env=environment, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        yield
    finally:
        process.terminate()
        process.wait(60)


def settled(home: Path, task_id: str) -> dict[str, object]:
    """Wait for the task to settle (`errand logs -f` returns then) and read it."""
    followed = errand(home, "logs", "-f", task_id)
    assert followed.returncode == 0, followed.stderr
    task: dict[str, object] = errand_json(home, "show", task_id)
    return task


@pytest.mark.slow
def test_a_failed_task_is_retried_accepted_and_followed_up_as_a_new_task(
        errand_home: Path, tmp_path: Path, script: Path) -> None:
    repo = make_repo(tmp_path / "project")
    submitted = errand(errand_home, "run", "Make test_calc.py pass", "--repo", str(repo), "--model",
                       f"scripted:{script}", "--no-worker", "--json")
    task_id = json.loads(submitted.stdout)["id"]
    # The model's script vanishes before the worker gets to it: the task fails, as a flaky
    # endpoint or a missing key would fail it.
    hidden = script.rename(tmp_path / "elsewhere.json")
    with worker(errand_home):
        assert settled(errand_home, task_id)["state"] == "failed"
        shown = errand(errand_home, "show", task_id).stdout
        assert "failed: cannot read model script" in shown and f"errand retry {task_id}" in shown
        refused = errand(errand_home, "reject", task_id, "--reason", "no")
        assert refused.returncode == 1
        assert f"task {task_id} failed; it has no result to review: `errand retry {task_id}`" in refused.stderr

        hidden.rename(script)
        retried = errand(errand_home, "retry", task_id)
        assert retried.returncode == 0, retried.stderr
        assert f"{task_id} queued again (a retry)" in retried.stdout
        task = settled(errand_home, task_id)
        assert task["state"] == "ready_for_review"
        runs: list[dict[str, object]] = task["runs"]  # type: ignore[assignment]
        assert [(run["round"], run["state"]) for run in runs] == [(1, "failed"), (2, "succeeded")]
        shown = errand(errand_home, "show", task_id).stdout
        assert "round 2: finished — confidence high" in shown and "attempt 2" not in shown
        assert "retried after it was failed: round 2" in errand(errand_home, "logs", task_id).stdout

        assert errand(errand_home, "accept", task_id).returncode == 0
        branch = str(task["branch"])
        for action in (["reject", task_id, "--reason", "changed my mind"], ["cancel", task_id], ["retry", task_id]):
            ran = errand(errand_home, *action)
            assert ran.returncode == 1, action
            assert f"was accepted (commit {git(repo, 'rev-parse', branch)[:12]} on branch {branch})" in ran.stderr
            assert f"git branch -D {branch}" in ran.stderr and "cannot move from" not in ran.stderr

        # A follow-up of accepted work is a new task that starts from the accepted branch.
        followed = errand_json(errand_home, "followup", task_id, "Also make double() right")
        assert followed["parent_id"] == task_id and followed["base_ref"] == branch
        assert followed["base_commit"] == git(repo, "rev-parse", branch).strip()
        assert followed["id"] != task_id and followed["branch"] != branch
        # The same script finds add() fixed already, so the new task changes nothing (and fails so).
        assert settled(errand_home, str(followed["id"]))["state"] == "failed"
        empty = errand(errand_home, "diff", str(followed["id"]))
        assert empty.returncode == 1 and empty.stdout == ""
        assert f"{followed['id']} changed nothing: round 1, attempt 1 has no diff" in empty.stderr
        assert f"follow-up, as new task {followed['id']}" in errand(errand_home, "logs", task_id).stdout


def test_cancelled_tasks_are_retried_and_followed_up_and_refusals_say_what_to_do(
        errand_home: Path, tmp_path: Path, script: Path) -> None:
    repo = make_repo(tmp_path / "project")
    task = errand_json(errand_home, "run", "Make test_calc.py pass", "--repo", str(repo), "--model",
                       f"scripted:{script}", "--no-worker")
    task_id = task["id"]
    early = errand(errand_home, "followup", task_id, "more", "--no-worker")
    assert early.returncode == 1 and "is queued and has no result yet; send the agent a message" in early.stderr
    assert errand(errand_home, "cancel", task_id, "--yes").returncode == 0
    again = errand(errand_home, "cancel", task_id)
    assert again.returncode == 1 and again.stderr.strip() == \
        f"error: task {task_id} was cancelled; nothing of it runs any more"

    retried = errand_json(errand_home, "retry", task_id, "--no-worker")
    assert retried["state"] == "queued"
    twice = errand(errand_home, "retry", task_id, "--no-worker")
    assert twice.returncode == 1 and "is queued and has no result yet" in twice.stderr

    assert errand(errand_home, "cancel", task_id, "--yes").returncode == 0
    review = errand_json(errand_home, "followup", task_id, "Keep add() pure", "--no-worker")
    assert review["verdict"] == "followup" and review["reason"] == "Keep add() pure"
    assert errand_json(errand_home, "show", task_id)["state"] == "queued"
    assert [line for line in errand(errand_home, "logs", task_id).stdout.splitlines() if line] == [
        "cancelled", "retried after it was cancelled: round 1 starts", "cancelled", "follow-up: Keep add() pure"]
