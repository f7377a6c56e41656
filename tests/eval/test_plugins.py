"""The grader's test command runs pytest with plugin autoload off and the base's plugins named: a
plugin a candidate patch declares (a distribution's ``pytest11`` entry point on the path) never
loads, and the names given cannot break out of the command."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from errand.eval.plugins import hardened

# A plugin that reports every test as passed: what a cheating patch would install.
FORCE_PASS = """\
import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    outcome.get_result().outcome = "passed"
"""


@pytest.fixture
def project(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A project with a failing test, and a path holding a distribution that declares the plugin."""
    site = tmp_path / "site"
    (site / "force_pass-1.0.dist-info").mkdir(parents=True)
    (site / "force_pass.py").write_text(FORCE_PASS)
    (site / "force_pass-1.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: force-pass\n"
                                                               "Version: 1.0\n")
    (site / "force_pass-1.0.dist-info" / "entry_points.txt").write_text("[pytest11]\nforce_pass = force_pass\n")
    root = tmp_path / "project"
    root.mkdir()
    (root / "test_calc.py").write_text("def test_add():\n    assert 1 + 1 == 3\n")
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST_")}
    return root, {**env, "PYTHONPATH": str(site)}


def shell(command: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True)


def test_a_plugin_the_candidate_declared_loads_only_when_named(project: tuple[Path, dict[str, str]]) -> None:
    root, env = project
    command = f"{shlex.quote(sys.executable)} -m pytest -q -p no:cacheprovider test_calc.py"
    assert shell(command, root, env).returncode == 0  # autoloaded, it passes the failing test
    refused = shell(hardened(command, []), root, env)
    assert refused.returncode == 1 and "1 failed" in refused.stdout
    assert shell(hardened(command, ["force_pass"]), root, env).returncode == 0  # a base plugin, named, loads


def test_plugin_names_are_quoted_into_the_command(tmp_path: Path) -> None:
    command = hardened('printf "%s|%s" "$PYTEST_DISABLE_PLUGIN_AUTOLOAD" "$PYTEST_ADDOPTS"',
                       ["xdist.plugin", "a; touch pwned", "$(touch pwned2)"])
    done = shell(command, tmp_path, dict(os.environ))
    assert done.stdout == "1|-p xdist.plugin -p 'a; touch pwned' -p '$(touch pwned2)'"
    assert list(tmp_path.iterdir()) == []
    assert shell(hardened("true", []), tmp_path, dict(os.environ)).returncode == 0
