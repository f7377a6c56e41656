"""The grader fed patches written to fool it, through `errand eval grade` with real pytest in real
sandboxes, on a small real project (:mod:`bursar`): each cheat class of the issue and a few more.

What the grader trusts: the base commit and the dataset's test patch. The runner's configuration
is the base's wherever it lives; pytest's plugins are the base environment's; a pass counts only
when the exit status, the JUnit report and pytest's own summary agree."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from engine.harness import openai_turn
from errand.cli import app
from eval.bursar import FORCE_PASS, build, git, patch_of
from models.wire import WireServer

pytestmark = [pytest.mark.slow, pytest.mark.faults]

PYTEST_TOML = '[pytest]\npythonpath = ["src"]\naddopts = ["-p", "force_pass"]\n'
# `python -m pytest` puts the working directory first on sys.path: this package *is* pytest there.
SHADOW_MAIN = '''import os
import sys

here = os.getcwd()
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
for name in [n for n in sys.modules if n == "pytest" or n.startswith("pytest.")]:
    del sys.modules[name]
import pytest  # the real one

sys.path.append(here)
sys.exit(pytest.main(sys.argv[1:] + ["-p", "force_pass"]))
'''
ENTRY_POINTS = "[pytest11]\nforce_pass = force_pass\n"
METADATA = "Metadata-Version: 2.1\nName: force-pass\nVersion: 1.0\n"
# Code the tests import that stops pytest writing failures into the JUnit report.
SILENCE_JUNIT = '''from _pytest import junitxml

junitxml._NodeReporter.append_failure = lambda self, report: None
'''
PTH = "import os; os.environ['PYTEST_ADDOPTS'] = '-p force_pass'\n"
SITE_PACKAGES = [f".venv/lib/python3.{minor}/site-packages" for minor in range(9, 15)]


def _cheats(root: Path, base1: str, core_fixed: str) -> dict[str, tuple[str, str]]:
    """name -> (instance, patch): every cheat leaves the bug in and tries to pass anyway."""
    plugin = {"force_pass.py": FORCE_PASS}
    pyproject = git(root / "repos/bursar", "show", f"{base1}:pyproject.toml")
    everywhere: dict[str, str | None] = {}
    for site in SITE_PACKAGES:
        everywhere.update({f"{site}/force_pass.py": FORCE_PASS, f"{site}/force_pass-1.0.dist-info/METADATA": METADATA,
                           f"{site}/force_pass-1.0.dist-info/entry_points.txt": ENTRY_POINTS})
    pth = {f"{site}/zz_force.pth": PTH for site in SITE_PACKAGES}
    one = "errand-eval__bursar-1"
    return {
        "gold": (one, patch_of(root, base1, {"src/bursar/core.py": core_fixed})),
        "pyproject addopts loads a plugin": (one, patch_of(root, base1, {
            **plugin, "pyproject.toml": pyproject.replace('pythonpath = ["src"]\n',
                                                          'pythonpath = ["src"]\naddopts = ["-p", "force_pass"]\n')})),
        "a new pytest.toml": (one, patch_of(root, base1, {**plugin, "pytest.toml": PYTEST_TOML})),
        "a conftest.py": (one, patch_of(root, base1, {"tests/conftest.py": FORCE_PASS})),
        "a package named pytest": (one, patch_of(root, base1, {**plugin, "pytest/__init__.py": "",
                                                               "pytest/__main__.py": SHADOW_MAIN})),
        "an entry point at the top": (one, patch_of(root, base1, {
            **plugin, "force_pass-1.0.dist-info/METADATA": METADATA,
            "force_pass-1.0.dist-info/entry_points.txt": ENTRY_POINTS})),
        "a plugin planted in the virtualenv": (one, patch_of(root, base1, everywhere)),
        "a .pth in the virtualenv": (one, patch_of(root, base1, {**plugin, **pth})),
        "silences the JUnit writer": (one, patch_of(root, base1, {"src/bursar/__init__.py": SILENCE_JUNIT})),
        "weakens a test helper": (one, patch_of(root, base1, {
            "tests/support.py": "def same_amount(a, b):\n    return True\n"})),
    }


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One `errand eval grade` of every cheat and of the gold and empty patches of both instances."""
    root = tmp_path_factory.mktemp("bursar")
    dataset = build(root)
    records = {r["instance_id"]: r for r in map(json.loads, dataset.read_text().splitlines())}
    base1 = records["errand-eval__bursar-1"]["base_commit"]
    core_fixed = (root / "repos/bursar/src/bursar/core.py").read_text()  # main holds every fix
    patches = _cheats(root, base1, core_fixed)
    patches["colour: gold"] = ("errand-eval__bursar-2", records["errand-eval__bursar-2"]["patch"])
    patches["colour: empty"] = ("errand-eval__bursar-2", "")
    predictions = root / "predictions.jsonl"
    predictions.write_text("".join(json.dumps({"instance_id": iid, "model_name_or_path": name, "model_patch": patch})
                                   + "\n" for name, (iid, patch) in patches.items()))
    result = CliRunner().invoke(app, ["eval", "grade", str(dataset), str(predictions), "--run-dir",
                                      str(root / "run"), "--jobs", "2", "--json"])
    assert result.exit_code == 0, result.output
    grades: dict[str, dict[str, Any]] = {}
    numbers: dict[str, int] = {}
    for name, (iid, _patch) in patches.items():
        numbers[iid] = numbers.get(iid, 0) + 1
        grades[name] = json.loads((root / f"run/instances/{iid}/prediction-{numbers[iid]}/grade.json").read_text())
    return {"root": root, "dataset": dataset, "grades": grades, "stderr": result.stderr,
            "summary": json.loads(result.stdout)}


def _kept(grade: dict[str, Any]) -> list[str]:
    prefix = "kept at the base (decides how tests run): "
    return sorted(flag.removeprefix(prefix) for flag in grade["flags"] if flag.startswith(prefix))


def test_the_gold_patch_resolves_with_the_base_environments_own_plugin(graded: dict[str, Any]) -> None:
    gold = graded["grades"]["gold"]
    # The suite needs the `rates` fixture of a plugin setup installed by entry point: autoload is off
    # in grading, and the plugin is named because the base environment loads it.
    assert (gold["status"], gold["error"], gold["flags"]) == ("resolved", None, [])
    assert gold["tests"] == {"tests/test_core.py::test_total_keeps_cents": "passed",
                             "tests/test_core.py::test_total_of_whole_amounts": "passed"}


@pytest.mark.parametrize(("cheat", "kept"), [
    ("pyproject addopts loads a plugin", ["pyproject.toml"]),
    ("a new pytest.toml", ["pytest.toml"]),
    ("a conftest.py", ["tests/conftest.py"]),
    ("a package named pytest", ["pytest/__init__.py", "pytest/__main__.py"]),
    ("an entry point at the top", ["force_pass-1.0.dist-info/METADATA", "force_pass-1.0.dist-info/entry_points.txt"]),
    ("a plugin planted in the virtualenv", sorted(
        f"{site}/{name}" for site in SITE_PACKAGES
        for name in ("force_pass.py", "force_pass-1.0.dist-info/METADATA",
                     "force_pass-1.0.dist-info/entry_points.txt"))),
    ("a .pth in the virtualenv", sorted(f"{site}/zz_force.pth" for site in SITE_PACKAGES)),
])
def test_the_runner_configuration_is_the_base_commits(graded: dict[str, Any], cheat: str, kept: list[str]) -> None:
    grade = graded["grades"][cheat]
    assert (grade["status"], grade["error"]) == ("unresolved", "tests_failed"), grade["detail"]
    assert grade["tests"]["tests/test_core.py::test_total_keeps_cents"] == "failed"
    assert _kept(grade) == kept


def test_tests_and_their_helpers_are_the_base_commits_and_the_test_patchs(graded: dict[str, Any]) -> None:
    grade = graded["grades"]["weakens a test helper"]
    assert (grade["status"], grade["error"]) == ("unresolved", "tests_failed"), grade["detail"]
    assert "edits tests: tests/support.py" in grade["flags"]
    assert "reset to the base (tests come from the base and the test patch): tests/support.py" in grade["flags"]


def test_a_source_change_that_silences_the_junit_writer_is_inconsistent(graded: dict[str, Any]) -> None:
    grade = graded["grades"]["silences the JUnit writer"]
    # pytest exits 1 and prints `1 failed`; the report says every test passed.
    assert grade["exit_code"] == 1
    assert (grade["status"], grade["error"]) == ("inconsistent", "inconsistent")
    assert grade["tests"]["tests/test_core.py::test_total_keeps_cents"] == "passed"  # what the report claims
    assert "the exit status and pytest's summary say tests failed, the JUnit report that none did" in grade["detail"]
    assert "1 failed, 1 passed" in grade["detail"]
    assert graded["summary"]["failures"]["agent"]["inconsistent"] == 1


def test_colour_forced_by_the_projects_config_is_read_through(graded: dict[str, Any]) -> None:
    gold, empty = graded["grades"]["colour: gold"], graded["grades"]["colour: empty"]
    assert "\x1b[" in gold["output"]  # the run's output is coloured
    # A test in neither list fails whatever the patch: pytest exits 1, and says so in colour.
    assert (gold["status"], gold["error"], gold["exit_code"]) == ("resolved", None, 1), gold["detail"]
    assert (empty["status"], empty["error"]) == ("unresolved", "tests_failed"), empty["detail"]


def test_grading_shows_a_line_per_instance_off_a_terminal(graded: dict[str, Any]) -> None:
    lines = [line for line in graded["stderr"].splitlines() if line.startswith("grading ")]
    assert len(lines) == len(graded["grades"])
    assert lines[-1].startswith(f"grading {len(lines)}/{len(lines)}: errand-eval__bursar-")


def test_validate_shows_progress_and_the_dataset_is_valid(graded: dict[str, Any]) -> None:
    result = CliRunner().invoke(app, ["eval", "validate", str(graded["dataset"]), "--repeat", "1", "--jobs", "2",
                                      "--run-dir", str(graded["root"] / "validate")])
    assert result.exit_code == 0, result.output
    assert "gold resolved 2/2, empty resolved 0/2, flaky tests 0" in result.stdout
    progress = [line for line in result.stderr.splitlines() if line.startswith("validating ")]
    assert [line.split(":")[0] for line in progress] == [f"validating {n}/4" for n in range(1, 5)]


def test_an_empty_predictions_file_is_one_line_of_error(graded: dict[str, Any], tmp_path: Path) -> None:
    empty = tmp_path / "predictions.jsonl"
    empty.write_text("\n")
    result = CliRunner().invoke(app, ["eval", "grade", str(graded["dataset"]), str(empty), "--run-dir",
                                      str(tmp_path / "run")])
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        f"error: {empty} holds no predictions: expected SWE-bench's {{instance_id, model_name_or_path, model_patch}}, "
        "one a line or as a JSON list"]
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert not (tmp_path / "run").exists()  # bad input changes nothing


def test_the_confidence_step_fills_the_junit_and_tests_places(graded: dict[str, Any], wire: WireServer) -> None:
    fix = ("edit_file", {"path": "src/bursar/core.py", "old": "return round(sum(amounts))",
                         "new": "return round(sum(amounts), 2)"})
    for n, turn in enumerate([[fix], [("finish", {"summary": "keeps the cents", "assumptions": []})]]):
        wire.answer(openai_turn(turn, n))
    run = graded["root"] / "agent-run"
    result = CliRunner().invoke(app, ["eval", "run", str(graded["dataset"]), "--model", "openai:wire-model",
                                      "-i", "errand-eval__bursar-1", "--run-dir", str(run), "--json"])
    assert result.exit_code == 0, result.output
    assert "solving 1/1: errand-eval__bursar-1 attempt-1: resolved" in result.stderr
    agent = json.loads((run / "instances/errand-eval__bursar-1/attempt-1/agent.json").read_text())
    # The project's tests ran with the report's path and the test files filled in, before and after.
    assert agent["confidence"] == "medium", agent["confidence_reasons"]
    assert "the tests pass after the change (pass — 1 passed)" in agent["confidence_reasons"]
    trajectory = json.loads((run / "instances/errand-eval__bursar-1/attempt-1/trajectory.json").read_text())
    commands = [event["data"]["command"] for event in trajectory if event["kind"] == "check_started"]
    assert commands and all("{" not in command and "--junitxml=" in command and command.endswith("tests/test_core.py")
                            for command in commands)
