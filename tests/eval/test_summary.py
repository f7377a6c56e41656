"""pytest's own summary line, read from the end of a run's output."""

from __future__ import annotations

from errand.eval.summary import parse_summary


def test_summary_lines_pytest_prints() -> None:
    def counts(line: str) -> dict[str, int] | None:
        found = parse_summary(f"some output\n{line}\n")
        return None if found is None else found.counts

    assert counts("=== 2 failed, 1 passed, 1 skipped, 3 warnings in 61.10s (0:01:01) ===") == {
        "failed": 2, "passed": 1, "skipped": 1, "warnings": 3}
    assert counts("1 passed, 2 subtests passed in 0.01s") == {"passed": 1, "subtests passed": 2}
    assert counts("===== 1 error in 0.10s =====") == {"errors": 1}
    assert counts("no tests ran in 0.01s") == {}
    assert counts("the pipeline ran in 2s") is None  # not pytest's
    assert parse_summary("FAILED tests/test_a.py::test_b\n") is None  # -qq prints no summary
