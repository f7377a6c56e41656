"""Every ``errand`` command starts by importing :mod:`errand.cli`, and the suite starts hundreds of
them: what only one command runs is imported by that command. The demo's engine (with the model
gateway and httpx) and the eval harness (with the HTML report's jinja2) are not loaded to show a task."""

from __future__ import annotations

import json
import subprocess
import sys

# Loaded by `errand demo`, `errand worker` or `errand eval ...`, never by `errand show` or `errand ls`.
ONLY_FOR_THEIR_COMMANDS = ("errand.tasks.engines.local", "errand.tasks.round.order", "errand.gateway",
                           "errand.eval.grading", "errand.eval.metrics", "errand.eval.compare",
                           "errand.server.eval_report", "jinja2", "rich.progress")


def _loaded(code: str) -> set[str]:
    done = subprocess.run([sys.executable, "-c", f"{code}\nimport json, sys; print(json.dumps(sorted(sys.modules)))"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout.splitlines()[-1]))


def test_importing_the_command_line_leaves_one_commands_modules_to_that_command() -> None:
    loaded = _loaded("import errand.cli")
    assert not loaded & set(ONLY_FOR_THEIR_COMMANDS), sorted(loaded & set(ONLY_FOR_THEIR_COMMANDS))
    assert "errand.tasks.service" in loaded  # the task commands' own layer is there, as it must be


def test_the_commands_that_need_them_still_find_them() -> None:
    loaded = _loaded("import errand.cli.demo, errand.cli.eval as e\ne._report_page, e._options(None)")
    assert {"errand.tasks.engines.local", "errand.eval.grading"} <= loaded
