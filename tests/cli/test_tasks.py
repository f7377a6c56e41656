"""The task commands as a person runs them: real ``errand`` processes, a background worker."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

import forkserver
from engine.cli import stop_worker
from engine.harness import git, make_repo, worktree_state

SCRIPT = [
    {"tool_calls": [{"name": "read_file", "arguments": {"path": "calc.py"}}]},
    {"tool_calls": [{"name": "edit_file", "arguments": {"path": "calc.py", "old": "return a - b",
                                                        "new": "return a + b"}}]},
    {"tool_calls": [{"name": "shell", "arguments": {"command": "python3 test_calc.py"}}]},
    {"tool_calls": [{"name": "finish", "arguments": {"summary": "add() now adds", "assumptions": []}}]},
]


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    """An errand home of this test's own; the worker `errand run` starts in it is stopped after."""
    home = tmp_path / "home"
    yield home
    stop_worker(home)


def errand(home: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ERRAND_HOME": str(home), "COLUMNS": "200"}
    env.pop("ERRAND_DATABASE_URL", None)
    return forkserver.run([*args], timeout=180, env=env, cwd=cwd)


def test_run_follow_show_diff_accept(home: Path, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "project")
    before = worktree_state(repo)
    script = tmp_path / "fix.json"
    script.write_text(json.dumps(SCRIPT))

    ran = errand(home, "run", "Make test_calc.py pass", "--repo", str(repo), "--model", f"scripted:{script}", "-f")
    assert ran.returncode == 0, ran.stderr
    assert "started a background worker" in ran.stdout
    assert "→ edit_file" in ran.stdout and "ready for review" in ran.stdout
    [task] = json.loads(errand(home, "ls", "--json").stdout)
    assert task["state"] == "ready_for_review"

    shown = errand(home, "show", task["id"]).stdout
    assert "tests on base: fail (exit 1)" in shown and "tests after: pass — 1 passed" in shown
    assert "confidence high" in shown
    diff = errand(home, "diff", task["id"])
    assert diff.stdout.startswith("diff --git a/calc.py b/calc.py") and "+    return a + b" in diff.stdout
    logs = errand(home, "logs", task["id"]).stdout
    assert "1 passed" in logs

    accepted = errand(home, "accept", task["id"])
    assert accepted.returncode == 0, accepted.stderr
    assert task["branch"] in accepted.stdout
    assert "return a + b" in git(repo, "show", f"{task['branch']}:calc.py")
    assert worktree_state(repo) == before
    again = errand(home, "accept", task["id"])
    assert again.returncode == 1 and "accepted" in again.stderr


@pytest.mark.parametrize(("arguments", "message"), [
    (["--repo", "{tmp}"], "is not a git repository"),
    (["--repo", "{repo}", "--base", "nope"], "unknown ref 'nope'"),
    (["--repo", "{repo}", "--model", "nosuch:model"], "unknown model"),
    (["--repo", "{repo}", "--attempts", "0"], "attempts must be"),
])
def test_bad_input_is_refused_and_creates_nothing(home: Path, tmp_path: Path, arguments: list[str],
                                                  message: str) -> None:
    repo = make_repo(tmp_path / "project")
    filled = [a.format(tmp=tmp_path, repo=repo) for a in arguments]
    if "--model" not in filled:
        filled += ["--model", "scripted:/dev/null"]
    ran = errand(home, "run", "fix it", *filled)
    assert ran.returncode == 2
    assert ran.stderr.startswith("error: ") and message in ran.stderr
    assert json.loads(errand(home, "ls", "--json").stdout) == []
    assert not (home / "worker.log").exists()  # no worker was started for nothing


def test_a_malformed_errand_toml_is_refused(home: Path, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "project", toml="[test]\ncomand = 'pytest'\n")
    ran = errand(home, "run", "fix it", "--repo", str(repo), "--model", "scripted:/dev/null")
    assert ran.returncode == 2 and "unknown key [test] comand (did you mean command?)" in ran.stderr
    assert json.loads(errand(home, "ls", "--json").stdout) == []


def test_unknown_task_ids_are_clear_errors(home: Path) -> None:
    for command in (["show", "t-nope"], ["diff", "t-nope"], ["cancel", "t-nope"], ["answer", "t-nope", "x"]):
        ran = errand(home, *command)
        assert ran.returncode == 1 and "no task has id 't-nope'" in ran.stderr, (command, ran.stderr)


def test_best_of_two_says_which_attempts_made_the_same_diff(home: Path, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "project")
    script = tmp_path / "fix.json"
    script.write_text(json.dumps(SCRIPT))  # both attempts replay it: the same change twice
    ran = errand(home, "run", "Make test_calc.py pass", "--repo", str(repo), "--model", f"scripted:{script}",
                 "--attempts", "2", "-f")
    assert ran.returncode == 0, ran.stderr
    [task] = json.loads(errand(home, "ls", "--json").stdout)
    shown = errand(home, "show", task["id"]).stdout
    assert "round 1, attempt 1  rank 1 of 2" in shown and "round 1, attempt 2  rank 2 of 2" in shown
    assert shown.count("the same diff as attempt 1") == 1, shown
    for attempt in (1, 2):
        assert f"round 1, attempt {attempt} (succeeded): 4 of 100 steps" in shown
    logs = errand(home, "logs", task["id"]).stdout.splitlines()
    for attempt in (1, 2):  # each attempt's lines, its output too, say whose they are
        assert f"#{attempt} → edit_file" in "\n".join(logs)
        assert f"#{attempt} 1 passed in 0.01s" in logs
    assert any(line.startswith("── round 1") for line in logs)  # the task's own lines are untagged
