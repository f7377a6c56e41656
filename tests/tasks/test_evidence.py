"""Confidence comes from evidence: each rule, and the parsers it reads test output with."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from errand.tasks.evidence import Evidence, TestRun, assess, is_test_file, parse_counts


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
