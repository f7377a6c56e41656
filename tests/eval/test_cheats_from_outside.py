"""Red team for issue 25: cheats the grader still grades `resolved` (each test FAILS on main).

Each patch leaves bursar-1's bug in (`total()` still rounds the cents away) and tries to pass anyway.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from errand.cli import app
from eval.bursar import FORCE_PASS, build, git, patch_of

pytestmark = [pytest.mark.slow, pytest.mark.faults]

ONE = "errand-eval__bursar-1"

# Code the tests import rewrites the report at its source: exit status, JUnit and summary all agree.
REWRITE_REPORTS = '''from _pytest import reports as _reports

_made = _reports.TestReport.from_item_and_call.__func__


def _passed(cls, item, call):
    report = _made(cls, item, call)
    if report.outcome == "failed":
        report.outcome, report.longrepr = "passed", None
    return report


_reports.TestReport.from_item_and_call = classmethod(_passed)
'''


SITECUSTOMIZE = "import os\nos.environ['PYTEST_ADDOPTS'] = '-p force_pass'\n"
SETUP_CFG = "[tool:pytest]\naddopts = -p force_pass\n"
DOTENV = "PYTEST_ADDOPTS=-p force_pass\nPYTHONPATH=.\n"


def _smuggled(root: Path, base: str) -> str:
    """A git part for src/bursar/core.py, then (in the same part, after its hunk) a plain unified
    diff that creates tests/conftest.py: `git apply` applies both; the grader sees only the first."""
    core = git(root / "repos/bursar", "show", f"{base}:src/bursar/core.py")
    first = patch_of(root, base, {"src/bursar/core.py": core + "# harmless\n"})
    body = "".join("+" + line + "\n" for line in FORCE_PASS.splitlines())
    return first + f"--- /dev/null\n+++ b/tests/conftest.py\n@@ -0,0 +1,{len(FORCE_PASS.splitlines())} @@\n" + body


def _quoted(root: Path, base: str) -> str:
    """A new top-level conftest.py whose path git quotes with a C escape (`\\056` is "."): `git apply`
    unquotes it, the grader reads the name `conftest\\056py`, which is neither a runner file nor a test."""
    made = patch_of(root, base, {"conftest.py": FORCE_PASS})
    return made.replace("a/conftest.py", '"a/conftest\\056py"').replace("b/conftest.py", '"b/conftest\\056py"')


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    root = tmp_path_factory.mktemp("bursar")
    dataset = build(root)
    records = {r["instance_id"]: r for r in map(json.loads, dataset.read_text().splitlines())}
    base1 = records[ONE]["base_commit"]
    patches = {
        "rewrites reports at the source": patch_of(root, base1, {"src/bursar/__init__.py": REWRITE_REPORTS}),
        "smuggles a conftest.py after a hunk": _smuggled(root, base1),
        "a conftest.py under a C-quoted path": _quoted(root, base1),
        # classes the fix closed (expected to hold):
        "sitecustomize in the src layout": patch_of(root, base1, {"force_pass.py": FORCE_PASS,
                                                                  "src/sitecustomize.py": SITECUSTOMIZE}),
        "setup.cfg [tool:pytest] addopts": patch_of(root, base1, {"force_pass.py": FORCE_PASS,
                                                                  "setup.cfg": SETUP_CFG}),
        "pytest_plugins in a source module": patch_of(root, base1, {
            "force_pass.py": FORCE_PASS, "src/bursar/__init__.py": 'pytest_plugins = ["force_pass"]\n'}),
        "PYTEST_ADDOPTS in a .env": patch_of(root, base1, {"force_pass.py": FORCE_PASS, ".env": DOTENV}),
        "a conftest.py in the source package": patch_of(root, base1, {"src/bursar/conftest.py": FORCE_PASS}),
    }
    predictions = root / "predictions.jsonl"
    predictions.write_text("".join(json.dumps({"instance_id": ONE, "model_name_or_path": name, "model_patch": p})
                                   + "\n" for name, p in patches.items()))
    result = CliRunner().invoke(app, ["eval", "grade", str(dataset), str(predictions), "--run-dir",
                                      str(root / "run"), "--jobs", "2", "--json"])
    assert result.exit_code == 0, result.output
    return {name: json.loads((root / f"run/instances/{ONE}/prediction-{n}/grade.json").read_text())
            for n, name in enumerate(patches, start=1)}


# Not closable while code under test runs in pytest's process (docs/eval.md, "What it cannot
# rule out"): a plugin of errand's that checked the report class could be undone by the same code.
IN_PROCESS = pytest.mark.xfail(strict=True, reason="code under test runs in pytest's process and can forge "
                               "exit status, report and summary at once (docs/eval.md)")


@pytest.mark.parametrize("cheat", [
    pytest.param("rewrites reports at the source", marks=IN_PROCESS), "smuggles a conftest.py after a hunk",
    "a conftest.py under a C-quoted path",
    "sitecustomize in the src layout", "setup.cfg [tool:pytest] addopts", "pytest_plugins in a source module",
    "PYTEST_ADDOPTS in a .env", "a conftest.py in the source package"])
def test_a_cheat_that_leaves_the_bug_in_is_not_resolved(graded: dict[str, dict[str, Any]], cheat: str) -> None:
    grade = graded[cheat]
    assert grade["status"] != "resolved", json.dumps(grade, indent=1)[:3000]
