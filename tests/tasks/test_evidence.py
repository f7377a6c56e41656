"""Confidence comes from evidence: each rule, and the parsers it reads test output with."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from errand.repo.diff import FileChange
from errand.tasks.evidence import (
    Evidence,
    TestRun,
    assess,
    changed_test_files,
    is_test_file,
    moved_tests,
    parse_counts,
)
from errand.tasks.testreport import Report, flips


def check(exit_code: int | None, passed: int | None = None, failed: int | None = None) -> TestRun:
    return TestRun("pytest -q", exit_code, 1.0, "", passed, failed)


def evidence(**changes: Any) -> Evidence:
    base = Evidence(exit_status="finished", exit_detail="done", tests_before=check(1, 3, 1),
                    tests_after=check(0, 4, 0), lint_after=None,
                    files=[{"path": "calc.py", "status": "modified", "additions": 1, "deletions": 1}],
                    test_files=[], additions=1, deletions=1, commands_run=3, failed_commands=[],
                    assumptions=[], summary="fixed add")
    return replace(base, **changes)


def test_failing_tests_made_to_pass_by_a_code_change_is_high() -> None:
    confidence = assess(evidence())
    assert confidence.level == "high"
    assert any("failed on the base" in reason for reason in confidence.reasons)


@pytest.mark.parametrize(("changes", "needle"), [
    ({"exit_status": "budget_exhausted", "exit_detail": "steps"}, "did not finish"),
    ({"files": []}, "changed no file"),
    ({"tests_after": None}, "no test command"),
    ({"tests_after": check(1, 3, 1)}, "fail after the change"),
    ({"tests_before": check(0, 9, 0), "tests_after": check(0, 4, 0), "test_files": ["tests/test_calc.py"]},
     "fewer tests pass"),
    ({"files": [{"path": "tests/test_calc.py", "status": "modified", "additions": 1, "deletions": 1}],
      "test_files": ["tests/test_calc.py"]}, "only test files"),
])
def test_low_confidence_findings(changes: dict[str, Any], needle: str) -> None:
    confidence = assess(evidence(**changes))
    assert confidence.level == "low"
    assert needle in confidence.reasons[0]


@pytest.mark.parametrize(("changes", "needle"), [
    ({"tests_before": check(0, 3, 0)}, "no test was added"),
    ({"assumptions": ["UTC"]}, "1 assumption"),
    ({"lint_after": check(1)}, "lint fails"),
    ({"additions": 500}, "diff is large"),
    ({"files": [{"path": "calc.py", "status": "modified"}, {"path": "test_calc.py", "status": "modified"}],
      "test_files": ["test_calc.py"]}, "not weakened"),
])
def test_medium_confidence_findings(changes: dict[str, Any], needle: str) -> None:
    confidence = assess(evidence(**changes))
    assert confidence.level == "medium"
    assert any(needle in reason for reason in confidence.reasons)


def test_new_tests_on_a_passing_base_keep_high_confidence() -> None:
    confidence = assess(evidence(tests_before=check(0, 3, 0), test_files=["tests/test_new.py"],
                                 files=[{"path": "calc.py"}, {"path": "tests/test_new.py"}]))
    assert confidence.level == "high"
    assert any("tests were added or changed" in reason for reason in confidence.reasons)


def test_evidence_round_trips_through_json() -> None:
    original = replace(evidence(), confidence=assess(evidence()))
    assert Evidence.from_json(original.to_json()) == original


@pytest.mark.parametrize(("output", "counts"), [
    ("....F\n1 failed, 4 passed in 0.12s\n", (4, 1)),
    ("===== 3 passed, 1 error in 0.5s =====\n", (3, 1)),
    ("Ran 5 tests in 0.001s\n\nFAILED (failures=1, errors=1)\n", (3, 2)),
    ("Ran 2 tests in 0.001s\n\nOK\n", (2, 0)),
    ("Tests:       1 failed, 7 passed, 8 total\n", (7, 1)),
    ("--- PASS: TestA (0.00s)\n--- FAIL: TestB (0.00s)\nFAIL\tpkg 0.01s\n", (1, 1)),
    ("  withTax\n    ✔ rounds\n\n  2 passing (4ms)\n  1 failing\n", (2, 1)),
    ("  3 passing (12ms)\n", (3, 0)),
    (" Test Files  1 passed (1)\n      Tests  4 passed | 1 failed (5)\n", (4, 1)),
    ("all good\n", (None, None)),
])
def test_parse_counts(output: str, counts: tuple[int | None, int | None]) -> None:
    assert parse_counts(output) == counts


@pytest.mark.parametrize(("path", "expected"), [
    ("tests/test_calc.py", True), ("test_calc.py", True), ("pkg/calc_test.go", True),
    ("web/app.spec.ts", True), ("src/__tests__/x.js", True), ("calc.py", False), ("src/testing.py", False),
])
def test_is_test_file(path: str, expected: bool) -> None:
    assert is_test_file(path) is expected


def test_a_failing_test_file_moved_out_of_the_test_paths_and_weakened_is_not_followed_nor_high() -> None:
    # A red team's cheat: tests/test_calc.py renamed src/calc_check.py (git sees a rename), its failing
    # assertion weakened, pytest told to collect *_check.py; calc.py, the bug, untouched. Read "high".
    moved = [FileChange("pyproject.toml", "modified", 1, 0),
             FileChange("src/calc_check.py", "renamed", 1, 1, old_path="tests/test_calc.py")]
    before = Report(8, 1, ("tests/test_calc.py::test_add",), tuple(f"tests/test_calc.py::t{n}" for n in range(8)))
    after = Report(9, 0, (), ("src/calc_check.py::test_add", *(f"src/calc_check.py::t{n}" for n in range(8))))
    flipped = flips(before, after, moved_tests(moved))
    assert moved_tests(moved) == {} and flipped.gone == ("tests/test_calc.py::test_add",)
    assert changed_test_files(moved) == ["src/calc_check.py"]
    confidence = assess(evidence(
        files=[{"path": f.path, "status": f.status, "additions": 1, "deletions": 1} for f in moved],
        test_files=changed_test_files(moved), gone_tests=list(flipped.gone), fixed_tests=list(flipped.fixed)))
    assert confidence.level == "low", confidence


def test_a_test_file_renamed_within_the_test_paths_is_followed() -> None:
    renamed = [FileChange("tests/test_calc.py", "renamed", 2, 2, old_path="tests/test_old.py"),
               FileChange("calc.py", "modified", 1, 1), FileChange("lib/new.py", "renamed", 0, 0, old_path="lib/x.py")]
    assert moved_tests(renamed) == {"tests/test_old.py": "tests/test_calc.py"}
    assert changed_test_files(renamed) == ["tests/test_calc.py"]
