"""The formats: SWE-bench instances and predictions, specs, JUnit reports, patches, figures."""

from __future__ import annotations

import json
from math import comb
from pathlib import Path

import pytest
from typer.testing import CliRunner

from errand.cli import app
from errand.eval.compare import compare
from errand.eval.dataset import load_dataset
from errand.eval.errors import EvalError
from errand.eval.grading import Grade
from errand.eval.junit import junit_key, outcomes, parse_junit
from errand.eval.metrics import Attempt, pass_at_k, pass_hat_k, summarize
from errand.eval.patches import edited_tests, runner_path, without, without_paths
from errand.eval.predictions import load_predictions

SPECS = '[repos."acme/widgets"]\nsource = "mirror/widgets"\nsetup = ["make env"]\ntest = "pytest -q"\n'


def _record(**changes: object) -> dict[str, object]:
    record: dict[str, object] = {
        "instance_id": "acme__widgets-1", "repo": "acme/widgets", "base_commit": "a" * 40,
        "problem_statement": "It breaks.", "patch": "", "test_patch": "",
        "FAIL_TO_PASS": '["tests/test_a.py::test_one", "tests/test_b.py::TestB::test_two[x]"]',
        "PASS_TO_PASS": ["tests/test_a.py::test_zero"]}
    record.update(changes)
    return record


def test_instances_from_jsonl_with_test_lists_as_json_strings(tmp_path: Path) -> None:
    (tmp_path / "specs.toml").write_text(SPECS)
    (tmp_path / "data.jsonl").write_text(json.dumps(_record()) + "\n")
    dataset = load_dataset(tmp_path / "data.jsonl", specs=tmp_path / "specs.toml")
    instance = dataset.instances[0]
    assert instance.fail_to_pass == ("tests/test_a.py::test_one", "tests/test_b.py::TestB::test_two[x]")
    assert instance.pass_to_pass == ("tests/test_a.py::test_zero",)
    assert instance.test_files == ("tests/test_a.py", "tests/test_b.py")
    assert instance.source == str((tmp_path / "mirror/widgets").resolve())
    assert instance.spec.setup == ("make env",)


def test_the_instance_errand_table_wins_over_the_specs_file(tmp_path: Path) -> None:
    (tmp_path / "specs.toml").write_text(SPECS)
    (tmp_path / "data.json").write_text(json.dumps([_record(errand={"test": "tox -e py"})]))
    instance = load_dataset(tmp_path / "data.json", specs=tmp_path / "specs.toml").instances[0]
    assert instance.spec.test == "tox -e py"
    assert instance.spec.setup == ("make env",)


def test_a_mirror_directory_gives_the_source(tmp_path: Path) -> None:
    (tmp_path / "mirror" / "acme__widgets").mkdir(parents=True)
    (tmp_path / "data.json").write_text(json.dumps([_record(errand={"test": "pytest"})]))
    instance = load_dataset(tmp_path / "data.json", mirror=tmp_path / "mirror").instances[0]
    assert instance.source == str((tmp_path / "mirror" / "acme__widgets").resolve())


@pytest.mark.parametrize(("record", "code"), [
    (_record(FAIL_TO_PASS="not json"), "eval_bad_dataset"),
    ({"instance_id": "x"}, "eval_bad_dataset"),
    (_record(errand={"tset": "pytest"}), "eval_bad_specs"),
    (_record(repo="other/repo"), "eval_no_spec"),
])
def test_bad_records_are_refused_with_a_code(tmp_path: Path, record: dict[str, object], code: str) -> None:
    (tmp_path / "specs.toml").write_text(SPECS)
    (tmp_path / "data.jsonl").write_text(json.dumps(record) + "\n")
    with pytest.raises(EvalError) as caught:
        load_dataset(tmp_path / "data.jsonl", specs=tmp_path / "specs.toml")
    assert caught.value.code == code


def test_predictions_in_swe_bench_shapes(tmp_path: Path) -> None:
    one = {"instance_id": "a", "model_name_or_path": "m", "model_patch": "diff"}
    (tmp_path / "p.jsonl").write_text(json.dumps(one) + "\n" + json.dumps({**one, "instance_id": "b",
                                                                            "model_patch": None}) + "\n")
    (tmp_path / "p.json").write_text(json.dumps({"a": one}))
    assert [(p.instance_id, p.model_patch) for p in load_predictions(tmp_path / "p.jsonl")] == [("a", "diff"),
                                                                                                ("b", "")]
    assert load_predictions(tmp_path / "p.json")[0].model_name_or_path == "m"


JUNIT = b"""<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.test_a" name="test_one" time="0.01"/>
<testcase classname="tests.test_b.TestB" name="test_two[x]" time="0.01"><failure message="boom"/></testcase>
<testcase classname="tests.test_a" name="test_zero" time="0.01"><skipped/></testcase>
<testcase classname="tests.test_a" name="test_one" time="0.01"><error message="teardown"/></testcase>
</testsuite></testsuites>"""


def test_junit_outcomes_by_swe_bench_test_id() -> None:
    assert junit_key("tests/test_b.py::TestB::test_two[x]") == ("tests.test_b.TestB", "test_two[x]")
    found = outcomes(parse_junit(JUNIT), ["tests/test_a.py::test_one", "tests/test_b.py::TestB::test_two[x]",
                                          "tests/test_a.py::test_zero", "tests/test_a.py::test_gone"])
    assert found == {"tests/test_a.py::test_one": "error", "tests/test_b.py::TestB::test_two[x]": "failed",
                     "tests/test_a.py::test_zero": "skipped", "tests/test_a.py::test_gone": "missing"}
    assert parse_junit(b"not xml <") == {}


PATCH = """\
diff --git a/src/core.py b/src/core.py
--- a/src/core.py
+++ b/src/core.py
@@ -1 +1 @@
-a
+b
diff --git a/tests/test_core.py b/tests/test_core.py
--- a/tests/test_core.py
+++ b/tests/test_core.py
@@ -1 +1 @@
-assert f() == 1
+assert True
diff --git a/tests/conftest.py b/tests/conftest.py
new file mode 100644
--- /dev/null
+++ b/tests/conftest.py
@@ -0,0 +1 @@
+import pytest
"""


def test_patch_parts_touching_the_test_patch_are_dropped() -> None:
    kept, dropped = without_paths(PATCH, {"tests/test_core.py"})
    assert dropped == ["tests/test_core.py"]
    assert "src/core.py" in kept and "tests/test_core.py" not in kept and "tests/conftest.py" in kept
    assert edited_tests(PATCH) == ["tests/conftest.py", "tests/test_core.py"]
    assert without(PATCH, runner_path)[1] == ["tests/conftest.py"]


def test_pass_at_k_against_hand_computation() -> None:
    # n=5 attempts, c=2 resolved: pass@1 = 2/5; pass@2 = 1 - C(3,2)/C(5,2) = 1 - 3/10.
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4)
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7)
    assert pass_at_k(5, 2, 4) == 1.0  # n - c < k: some draw must hold a resolved one
    assert pass_hat_k(5, 2, 2) == pytest.approx(1 / 10)
    assert pass_hat_k(5, 2, 3) == 0.0
    assert pass_at_k(3, 0, 3) == 0.0
    with pytest.raises(ValueError):
        pass_at_k(2, 1, 3)
    for n in range(1, 7):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert pass_at_k(n, c, k) == pytest.approx(1 - comb(n - c, k) / comb(n, k))


def _attempt(iid: str, resolved: bool, confidence: str | None = None, error: str | None = None) -> Attempt:
    failure = None if resolved else ("infrastructure" if error == "setup_failed" else "agent")
    return Attempt(Grade(iid, "attempt", "resolved" if resolved else "unresolved", error=error, failure=failure),
                   confidence=confidence, tokens=10, cost=0.5)


def test_summary_figures_failures_and_calibration() -> None:
    summary = summarize({
        "a": [_attempt("a", True, "high"), _attempt("a", False, "high", "tests_failed"), _attempt("a", True, "medium")],
        "b": [_attempt("b", False, "low", "patch_failed"), _attempt("b", False, "low", "setup_failed"),
              _attempt("b", False, "high", "tests_failed")],
    })
    assert summary["pass_at_k"]["1"] == pytest.approx((2 / 3 + 0) / 2, abs=1e-6)
    assert summary["pass_at_k"]["2"] == pytest.approx((1 + 0) / 2)
    assert summary["pass_hat_k"]["2"] == pytest.approx((1 / 3) / 2, abs=1e-6)
    assert summary["failures"] == {"agent": {"patch_failed": 1, "tests_failed": 2},
                                   "infrastructure": {"setup_failed": 1}}
    high = next(row for row in summary["calibration"] if row["confidence"] == "high")
    assert (high["attempts"], high["resolved"]) == (3, 1)
    assert summary["tokens"] == 60 and summary["cost"] == 3.0


def test_compare_is_paired_over_shared_instances() -> None:
    a = {iid: [_attempt(iid, False)] for iid in "abcd"}
    b = {iid: [_attempt(iid, iid in "abc")] for iid in "abce"}
    result = compare(a, b)
    assert result["instances"] == 3 and result["only_in_a"] == ["d"] and result["only_in_b"] == ["e"]
    assert result["difference"] == 1.0 and result["b_better"] == ["a", "b", "c"]
    assert result["ci95"] == [1.0, 1.0]
    mixed = compare({iid: [_attempt(iid, iid == "a")] for iid in "abcd"},
                    {iid: [_attempt(iid, iid in "bc")] for iid in "abcd"})
    low, high = mixed["ci95"]
    assert low < mixed["difference"] < high


def test_a_run_directory_keeps_its_model(tmp_path: Path) -> None:
    (tmp_path / "data.jsonl").write_text(json.dumps(_record()) + "\n")
    (tmp_path / "specs.toml").write_text(SPECS)
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"command": "run", "model": "openai:first", "k": 3}))
    result = CliRunner().invoke(app, ["eval", "run", str(tmp_path / "data.jsonl"), "--model", "openai:second",
                                      "--run-dir", str(run)])
    assert result.exit_code == 2
    assert "holds a run of openai:first" in result.output.replace("\n", " ")
    assert json.loads((run / "run.json").read_text())["model"] == "openai:first"
