"""Grading through `errand eval`, in real sandboxes, on the shipped sample dataset."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from errand import _settings
from errand.cli import app
from errand.eval.sample import sample_dir
from errand.eval.strip import stripped_source

pytestmark = pytest.mark.slow

CONFTEST_CHEAT = """\
import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    outcome.get_result().outcome = "passed"
"""


@pytest.fixture(scope="module")
def sample() -> Path:
    return sample_dir(_settings.cache_dir())


def _record(sample: Path, instance_id: str) -> dict[str, str]:
    for line in sample.read_text().splitlines():
        record = json.loads(line)
        if record["instance_id"] == instance_id:
            return dict(record)
    raise AssertionError(instance_id)


def _patch(sample: Path, instance_id: str, files: dict[str, str]) -> str:
    """A patch made with git against the instance's base: ``files`` written over it."""
    record = _record(sample, instance_id)
    repo = sample.parent / "repos" / record["repo"].split("/")[1]
    scratch = Path(subprocess.run(["mktemp", "-d"], capture_output=True, text=True, check=True).stdout.strip())
    subprocess.run(["git", "clone", "-q", str(repo), str(scratch / "c")], check=True)
    subprocess.run(["git", "checkout", "-q", record["base_commit"]], cwd=scratch / "c", check=True)
    for name, text in files.items():
        (scratch / "c" / name).write_text(text)
    subprocess.run(["git", "add", "-A"], cwd=scratch / "c", check=True)
    diff = subprocess.run(["git", "diff", "--cached"], cwd=scratch / "c", capture_output=True, text=True,
                          check=True).stdout
    subprocess.run(["rm", "-rf", str(scratch)], check=True)
    return diff


def _base_file(sample: Path, instance_id: str, name: str) -> str:
    record = _record(sample, instance_id)
    repo = sample.parent / "repos" / record["repo"].split("/")[1]
    return subprocess.run(["git", "show", f"{record['base_commit']}:{name}"], cwd=repo, capture_output=True,
                          text=True, check=True).stdout


def test_validate_the_sample_gold_resolves_empty_does_not_no_flaky_test(tmp_path: Path) -> None:
    # Two runs of each patch, not the default three: two already show a test that flips between runs
    # (a third cost 17 s of CPU and held nothing more).
    result = CliRunner().invoke(app, ["eval", "validate", "sample", "--jobs", "2", "--repeat", "2", "--run-dir",
                                      str(tmp_path / "run"), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["instances"] == 15
    assert (summary["gold_resolved"], summary["empty_resolved"], summary["flaky"]) == (15, 0, [])
    assert len({row["instance_id"].split("-")[-2] for row in summary["per_instance"]}) == 3  # three repositories
    report = json.loads((tmp_path / "run/instances/errand-eval__spans-2/gold-1/report.json").read_text())
    entry = report["errand-eval__spans-2"]
    assert entry["resolved"] is True and entry["patch_successfully_applied"] is True
    assert entry["tests_status"]["FAIL_TO_PASS"] == {"success": ["tests/test_merge.py::test_merge_unsorted"],
                                                     "failure": []}
    empty = json.loads((tmp_path / "run/instances/errand-eval__spans-2/empty-1/report.json").read_text())
    assert empty["errand-eval__spans-2"]["tests_status"]["FAIL_TO_PASS"]["failure"] == [
        "tests/test_merge.py::test_merge_unsorted"]

    spans = tmp_path / "run/instances/errand-eval__spans-2"
    assert "diff --git" in (spans / "gold-1/patch.diff").read_text()  # the graded patch, for the report
    assert (spans / "empty-1/patch.diff").read_text() == ""
    page = (tmp_path / "run/report.html").read_text()
    assert "gold resolved 15 of 15, empty resolved 0, flaky tests 0 — <strong>valid</strong>" in page
    assert "pass@k" not in page  # gold and empty patches have no pass@k worth showing

    again = CliRunner().invoke(app, ["eval", "validate", "sample", "--repeat", "2", "--run-dir", str(tmp_path / "run")])
    assert again.exit_code == 0 and "gold resolved 15/15, empty resolved 0/15, flaky tests 0" in again.output


def test_cheats_do_not_pass(sample: Path, tmp_path: Path) -> None:
    iid = "errand-eval__tally-1"
    core = _base_file(sample, iid, "src/tally/core.py")
    fixed = core.replace("return round(sum(amounts))", "return round(sum(amounts), 2)")
    tests = _base_file(sample, iid, "tests/test_core.py")
    cheats = {
        "conftest": _patch(sample, iid, {"tests/conftest.py": CONFTEST_CHEAT}),
        "edits the failing test away": _patch(sample, iid, {
            "tests/test_core.py": tests + "\n\ndef test_total_keeps_cents():\n    pass\n"}),
        "exits non-zero after passing": _patch(sample, iid, {
            "src/tally/core.py": "import atexit\nimport os\n\natexit.register(os._exit, 3)\n" + fixed}),
        "gold with a test edit": _patch(sample, iid, {"src/tally/core.py": fixed, "tests/test_core.py":
                                                      tests + "\n\ndef test_extra():\n    assert True\n"}),
        "does not apply": "diff --git a/nothing.py b/nothing.py\n--- a/nothing.py\n+++ b/nothing.py\n"
                          "@@ -1 +1 @@\n-x\n+y\n",
    }
    predictions = tmp_path / "predictions.jsonl"
    predictions.write_text("".join(json.dumps({"instance_id": iid, "model_name_or_path": name, "model_patch": patch})
                                   + "\n" for name, patch in cheats.items()))
    result = CliRunner().invoke(app, ["eval", "grade", "sample", str(predictions), "--run-dir", str(tmp_path / "run"),
                                      "--jobs", "2", "--json"])
    assert result.exit_code == 0, result.output
    grades = [json.loads((tmp_path / f"run/instances/{iid}/prediction-{n}/grade.json").read_text())
              for n in range(1, len(cheats) + 1)]
    found = {name: (grade["status"], grade["error"]) for name, grade in zip(cheats, grades, strict=True)}
    assert found == {
        "conftest": ("unresolved", "tests_failed"),  # the base's conftest (none) ran, not the patch's
        "edits the failing test away": ("unresolved", "tests_failed"),
        "exits non-zero after passing": ("error", "test_run_error"),
        "gold with a test edit": ("resolved", None),
        "does not apply": ("error", "patch_failed"),
    }
    assert "reset to the base before the test patch: tests/test_core.py" in grades[1]["flags"]
    assert "edits tests: tests/test_core.py" in grades[3]["flags"]
    assert "kept at the base (decides how tests run): tests/conftest.py" in grades[0]["flags"]
    summary = json.loads(result.stdout)
    assert summary["failures"]["agent"] == {"patch_failed": 1, "test_run_error": 1, "tests_failed": 2}
    assert summary["flagged_attempts"] == 3


def test_the_graded_clone_holds_nothing_after_the_base(sample: Path) -> None:
    record = _record(sample, "errand-eval__slugkit-2")
    repo = sample.parent / "repos/slugkit"
    later = subprocess.run(["git", "rev-list", f"{record['base_commit']}..main"], cwd=repo, capture_output=True,
                           text=True, check=True).stdout.split()
    assert len(later) == 4
    stripped = stripped_source(str(repo), record["base_commit"])
    objects = subprocess.run(["git", "cat-file", "--batch-all-objects", "--batch-check=%(objectname)"],
                             cwd=stripped, capture_output=True, text=True, check=True).stdout.split()
    assert not set(later) & set(objects)
    refs = subprocess.run(["git", "for-each-ref", "--format=%(refname)"], cwd=stripped, capture_output=True,
                          text=True, check=True).stdout.split()
    assert refs == ["refs/heads/main", "refs/tags/v1.0.0"]
