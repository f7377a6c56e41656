"""A stranger's repository without errand.toml: errand detects how to set it up and test it
from its files, says so in the log, and the task reaches review with real tests before and
after (a hatchling package, its test pins from a requirements file, from the registry)."""

from __future__ import annotations

from pathlib import Path

import pytest

from .cli import errand, errand_json, script
from .harness import git
from .projects import gold_patch, python_project

pytestmark = [pytest.mark.slow, pytest.mark.network]


def test_a_project_without_errand_toml_is_set_up_and_tested_as_its_files_say(errand_home: Path,
                                                                             tmp_path: Path) -> None:
    repo = python_project(tmp_path / "tally")
    git(repo, "rm", "-q", "errand.toml")
    git(repo, "commit", "-q", "-m", "no errand.toml")
    patch = gold_patch(repo, tmp_path)
    model = script(tmp_path / "agent.json", [
        [("shell", {"command": f"cat > /tmp/fix.patch <<'ERRAND_EOF'\n{patch}ERRAND_EOF\ngit apply /tmp/fix.patch"})],
        [("finish", {"summary": "total() keeps cents; mean() added", "assumptions": []})]])
    ran = errand(errand_home, "run", "Make the test suite pass", "--repo", str(repo), "--model", model, "-f")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    [task] = errand_json(errand_home, "ls")
    shown = errand_json(errand_home, "show", task["id"])
    assert shown["state"] == "ready_for_review", shown
    evidence = shown["runs"][0]["result"]["evidence"]
    assert evidence["tests_before"]["command"] == ".venv/bin/python -m pytest -q"
    assert evidence["tests_before"]["exit_code"] != 0 and evidence["tests_after"]["exit_code"] == 0
    assert evidence["tests_after"]["passed"] == 4
    assert evidence["confidence"]["level"] == "high", evidence["confidence"]
    logs = errand(errand_home, "logs", task["id"]).stdout
    assert "no errand.toml, so detected:" in " ".join(logs.split()), logs[:3000]
    assert "requirements-test.txt" in logs and "errand init" in logs
