"""The exit status, the JUnit report and pytest's summary line held against each other."""

from __future__ import annotations

from errand.eval.agreement import disagreement
from errand.eval.junit import Outcome
from errand.eval.summary import parse_summary


def test_the_three_accounts_must_agree() -> None:
    one_failed = parse_summary("1 failed, 1 passed in 0.02s")
    both_passed = parse_summary("2 passed in 0.02s")
    failed: dict[tuple[str, str], Outcome] = {("t", "a"): "passed", ("t", "b"): "failed"}
    passed: dict[tuple[str, str], Outcome] = {("t", "a"): "passed", ("t", "b"): "passed"}
    assert disagreement(1, failed, one_failed) is None
    assert disagreement(0, passed, both_passed) is None
    silenced = disagreement(1, passed, one_failed)
    assert silenced is not None and "the JUnit report that none did" in silenced
    assert disagreement(0, passed, one_failed) is not None
    assert disagreement(1, failed, both_passed) is not None
    assert disagreement(0, passed, None) is not None
    padded = disagreement(0, {**passed, ("t", "c"): "passed"}, both_passed)
    assert padded is not None and "3 passed tests" in padded
    assert disagreement(5, {}, parse_summary("no tests ran in 0.01s")) is None
