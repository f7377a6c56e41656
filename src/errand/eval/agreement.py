"""Three accounts of one test run, held against each other.

pytest tells how a run went three ways: its exit status, the JUnit report it
writes, and the summary line it prints. Code under test that reaches into pytest
(a module that replaces ``_NodeReporter.append_failure``, so a failing test is
written to the report as passed) changes one account and leaves the others: the
run still exits 1 and prints ``1 failed``. A test counts as passed only when all
three agree; when they do not, the grade is ``inconsistent`` and not resolved.
"""

from __future__ import annotations

from collections.abc import Mapping

from errand.eval.junit import Outcome
from errand.eval.summary import Summary

__all__ = ["NO_TESTS", "disagreement"]

NO_TESTS = 5  # pytest's exit status when it collected nothing: no failure, and no pass either


def disagreement(exit_code: int, cases: Mapping[tuple[str, str], Outcome], summary: Summary | None) -> str | None:
    """Why the exit status, the report's ``cases`` and the runner's ``summary`` disagree, or None."""
    if summary is None:
        return ("pytest printed no summary line (`1 failed, 2 passed in 0.12s`), so nothing confirms the "
                "report; a test command with -qq prints none")
    report_bad = sum(outcome in ("failed", "error") for outcome in cases.values())
    report_passed = sum(outcome == "passed" for outcome in cases.values())
    accounts = {"the exit status": exit_code not in (0, NO_TESTS), "the JUnit report": report_bad > 0,
                "pytest's summary": summary.bad > 0}
    if len(set(accounts.values())) > 1:
        failed = [name for name, said in accounts.items() if said]
        passed = [name for name, said in accounts.items() if not said]
        return (f"{' and '.join(failed)} say tests failed, {' and '.join(passed)} that none did "
                f"(exit {exit_code}; report {report_bad} failed of {len(cases)}; summary `{summary.line}`)")
    if report_passed > summary["passed"] + summary["xpassed"]:
        return (f"the JUnit report has {report_passed} passed tests, pytest's summary {summary['passed']} "
                f"(`{summary.line}`)")
    return None
