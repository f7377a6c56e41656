"""Real work on a real project, through the CLI: what an agent does (create, delete, rename files
at the top and below, ``sed -i``, ``git apply``) on a ``pyproject.toml`` project whose build
backend writes a version file, set up the way a user writes ``errand.toml`` first."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .cli import errand, errand_json, script
from .harness import make_repo
from .projects import gold_patch, npm_gold_patch, npm_project, python_project

pytestmark = [pytest.mark.slow, pytest.mark.network]

SHELL_WORK = (
    "set -e; touch NOTES.txt; mkdir scratch; echo hi > scratch/a.txt; echo draft > new.py; "
    "rm -r scratch NOTES.txt new.py; echo later > TODO.md; mv TODO.md TODO.txt; rm TODO.txt"
)


def _run_to_review(home: Path, repo: Path, title: str, model: str) -> tuple[Any, Any, Any]:
    """``errand run -f`` as a person types it; the task, its one run and that run's evidence,
    once the task is ready for review."""
    ran = errand(home, "run", title, "--repo", str(repo), "--model", model, "-f")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    [task] = errand_json(home, "ls")
    shown = errand_json(home, "show", task["id"])
    assert shown["state"] == "ready_for_review", shown
    [run] = shown["runs"]
    return task, run, run["result"]["evidence"]


def _apply(patch: str) -> str:
    return f"cat > /tmp/fix.patch <<'ERRAND_EOF'\n{patch}ERRAND_EOF\ngit apply /tmp/fix.patch && git status --short"


def test_a_real_fix_reaches_review_with_high_confidence_and_the_branch_passes_in_a_fresh_clone(
        errand_home: Path, tmp_path: Path) -> None:
    repo = python_project(tmp_path / "tally")
    model = script(tmp_path / "agent.json", [
        [("shell", {"command": SHELL_WORK})],
        [("shell", {"command": _apply(gold_patch(repo, tmp_path))})],
        [("shell", {"command": "sed -i 's/Sums receipts/Sums receipts and refunds/' README.md"})],
        [("shell", {"command": ".venv/bin/python -m pytest -q"})],
        [("finish", {"summary": "total() keeps cents; mean() added; usage moved to the top", "assumptions": []})],
    ])
    task, run, evidence = _run_to_review(errand_home, repo, "Make the test suite pass", model)
    assert evidence["confidence"]["level"] == "high", evidence["confidence"]
    assert evidence["tests_before"]["exit_code"] != 0 and evidence["tests_after"]["exit_code"] == 0
    assert evidence["tests_after"]["passed"] == 4
    assert run["state"] == "succeeded" and run["result"]["caches"]["environment"]["cached"] is False
    # Every shell command the agent ran worked, the top-level ones included.
    assert evidence["failed_commands"] == []
    changes = {f["path"]: f["status"] for f in evidence["files"]}
    assert changes == {"src/tally/core.py": "modified", "src/tally/stats.py": "added", "CHANGELOG.md": "deleted",
                       "USAGE.md": "renamed", "README.md": "modified"}
    diff = errand(errand_home, "diff", task["id"]).stdout
    assert "rename from docs/usage.md" in diff and "_version.py" not in diff and ".venv" not in diff

    accepted = errand(errand_home, "accept", task["id"], "--yes")  # the fix deletes a file: the guard asks
    assert accepted.returncode == 0, accepted.stderr
    clone = tmp_path / "fresh"
    subprocess.run(["git", "clone", "-q", "--branch", task["branch"], str(repo), str(clone)], check=True)
    assert not (clone / "CHANGELOG.md").exists() and (clone / "USAGE.md").is_file()
    assert "and refunds" in (clone / "README.md").read_text()
    for command in ([sys.executable, "-m", "venv", ".venv"],
                    [".venv/bin/pip", "install", "-q", "-e", ".", "-r", "requirements-test.txt"],
                    [".venv/bin/python", "-m", "pytest", "-q"]):
        done = subprocess.run(command, cwd=clone, capture_output=True, text=True)
        assert done.returncode == 0, (command, done.stdout, done.stderr)
    assert "4 passed" in done.stdout


@pytest.mark.parametrize("isolation", ["namespace", "gvisor"])
def test_setup_sees_tags_and_its_tree_writes_reach_the_agent_outside_the_diff(
        errand_home: Path, tmp_path: Path, isolation: str) -> None:
    repo = python_project(tmp_path / "tally")
    model = script(tmp_path / "agent.json", [
        [("shell", {"command": "cat src/tally/_version.py; .venv/bin/python -c 'import tally; "
                               "print(\"version\", tally.__version__)'"})],
        [("finish", {"summary": "looked", "assumptions": []})],
    ])
    errand(errand_home, "run", "Look around", "--repo", str(repo), "--model", model, "-f",
           env={"ERRAND_ISOLATION": isolation})
    [task] = errand_json(errand_home, "ls")
    [environment] = [e["data"] for e in _events(errand_home, task["id"]) if e["kind"] == "environment"]
    assert environment["isolation"] == isolation
    outputs = [e for e in _events(errand_home, task["id"]) if e["kind"] == "tool_result"]
    assert "version 1.4.0" in outputs[0]["data"]["content"], outputs[0]
    kept = [e["data"] for e in _events(errand_home, task["id"]) if e["kind"] == "setup_tree"]
    assert kept and kept[0]["kept"] >= 2 and ".venv/" in kept[0]["kept_sample"]
    assert errand_json(errand_home, "show", task["id"])["state"] == "failed"  # it changed nothing
    [run] = errand_json(errand_home, "show", task["id"])["runs"]
    assert run["state"] == "failed" and "without changing anything" in run["result"]["detail"]


def test_two_repositories_with_the_same_setup_get_environments_of_their_own(
        errand_home: Path, tmp_path: Path) -> None:
    toml = ('[setup]\ncommands = ["python3 -m venv /opt/venv && /opt/venv/bin/pip install --quiet '
            '--no-build-isolation --no-deps -e ."]\n[test]\ncommand = "/opt/venv/bin/python -c \'import {name}\'"\n')
    setup_py = "from setuptools import setup\nsetup(name='{name}', version='1.0', py_modules=['{name}'])\n"
    states = []
    for name in ("alpha", "beta"):
        repo = make_repo(tmp_path / name, toml=toml.replace("{name}", name),
                         files={"setup.py": setup_py.format(name=name), f"{name}.py": "VALUE = 1\n"})
        model = script(tmp_path / f"{name}.json", [
            # Installed under its own name (not merely importable from /workspace, as any checkout is).
            [("shell", {"command": f"/opt/venv/bin/python -c 'import importlib.metadata as m; "
                                   f"print(m.version(\"{name}\"))' && echo x >> {name}.py"})],
            [("finish", {"summary": "touched", "assumptions": []})],
        ])
        errand(errand_home, "run", "touch it", "--repo", str(repo), "--model", model, "-f")
        task = next(t for t in errand_json(errand_home, "ls") if t["repo"] == str(repo))
        shown = errand_json(errand_home, "show", task["id"])
        # The agent imports its own repository's package from the environment setup made.
        # (Its test command fails after: the agent's `echo x` broke the module, and that is a failed
        # command of its own, the tests after's.)
        agents = [c for c in shown["runs"][0]["result"]["evidence"]["failed_commands"] if "check" not in c]
        assert agents == [], name
        caches = shown["runs"][0]["result"].get("caches", {})
        states.append((shown["state"], (caches.get("environment") or {}).get("cached")))
    assert states == [("ready_for_review", False), ("ready_for_review", False)]


def _events(home: Path, task_id: str) -> list[dict[str, object]]:
    import json
    import sqlite3

    with sqlite3.connect(home / "errand.db") as db:
        rows = db.execute("SELECT kind, data FROM events WHERE task_id = ? ORDER BY id", (task_id,)).fetchall()
    return [{"kind": kind, "data": json.loads(data)} for kind, data in rows]


def test_an_npm_projects_fix_with_a_typescript_build_reaches_review_and_its_branch_passes(
        errand_home: Path, tmp_path: Path) -> None:
    repo = npm_project(tmp_path / "pricing")
    model = script(tmp_path / "agent.json", [
        [("shell", {"command": "ls node_modules/.bin/tsc node_modules/.bin/mocha && " + SHELL_WORK})],
        [("shell", {"command": _apply(npm_gold_patch(repo, tmp_path))})],
        [("shell", {"command": "npm test"})],
        [("finish", {"summary": "withTax rounds to cents; discount added", "assumptions": []})],
    ])
    task, _run, evidence = _run_to_review(errand_home, repo, "Make npm test pass", model)
    assert evidence["failed_commands"] == [], evidence["failed_commands"]
    assert evidence["confidence"]["level"] == "high", evidence["confidence"]
    assert evidence["tests_before"]["exit_code"] != 0 and evidence["tests_after"]["exit_code"] == 0
    assert evidence["tests_after"]["passed"] == 2
    changes = {f["path"]: f["status"] for f in evidence["files"]}
    assert changes == {"src/price.ts": "modified", "src/discount.ts": "added", "HISTORY.md": "deleted",
                       "API.md": "renamed", "README.md": "modified"}
    assert errand(errand_home, "accept", task["id"], "--yes").returncode == 0  # it deletes a file: the guard asks
    clone = tmp_path / "fresh"
    subprocess.run(["git", "clone", "-q", "--branch", task["branch"], str(repo), str(clone)], check=True)
    for command in (["npm", "ci", "--no-audit", "--no-fund"], ["npm", "test"]):
        done = subprocess.run(command, cwd=clone, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, (command, done.stdout, done.stderr)
    assert "2 passing" in done.stdout
