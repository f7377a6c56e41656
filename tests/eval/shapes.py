"""Shapes the eval tests share: a SWE-bench record with its specs file, and a graded attempt."""

from __future__ import annotations

from typing import Literal

from errand.eval.grading import Grade
from errand.eval.metrics import Attempt

SPECS = '[repos."acme/widgets"]\nsource = "mirror/widgets"\nsetup = ["make env"]\ntest = "pytest -q"\n'


def swe_record(**changes: object) -> dict[str, object]:
    """A SWE-bench record of ``acme/widgets`` (one test list a JSON string, one a list), with ``changes``."""
    found: dict[str, object] = {
        "instance_id": "acme__widgets-1", "repo": "acme/widgets", "base_commit": "a" * 40,
        "problem_statement": "It breaks.", "patch": "", "test_patch": "",
        "FAIL_TO_PASS": '["tests/test_a.py::test_one", "tests/test_b.py::TestB::test_two[x]"]',
        "PASS_TO_PASS": ["tests/test_a.py::test_zero"]}
    found.update(changes)
    return found


def attempt(iid: str, resolved: bool, confidence: str | None = None, error: str | None = None) -> Attempt:
    failure: Literal["agent", "infrastructure"] | None = None if resolved else (
        "infrastructure" if error == "setup_failed" else "agent")
    return Attempt(Grade(iid, "attempt", "resolved" if resolved else "unresolved", error=error, failure=failure),
                   confidence=confidence, tokens=10, cost=0.5)
