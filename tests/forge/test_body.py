"""The pull request's body says which tests a change flipped, and why a test command failed."""

from __future__ import annotations

from errand.forge.outbound.body import pull_body
from errand.tasks.evidence import Evidence, TestRun, assess, failed_checks
from errand.tasks.lifecycle import TaskState
from errand.tasks.records import Task

TASK = Task(id="t-0000beef", title="Make refunds count", instruction="", repo="/r", base_ref="main",
            base_commit=None, model=None, model_endpoint=None, attempts=1, state=TaskState.READY_FOR_REVIEW,
            branch=None, parent_id=None, created_at=0.0, updated_at=0.0)


def _evidence(after: TestRun, **fields: object) -> Evidence:
    evidence = Evidence(
        exit_status="finished", exit_detail="done",
        tests_before=TestRun("pytest", 1, 1.0, "", 3, 2,
                             failing=["tests/test_a.py::test_x", "tests/test_a.py::test_y"]),
        tests_after=after, lint_after=None, files=[{"path": "a.py", "status": "modified"}], test_files=[],
        additions=1, deletions=1, commands_run=1, failed_commands=failed_checks(("tests after", after)),
        assumptions=[], summary="fixed", **fields)  # type: ignore[arg-type]
    return Evidence(**{**evidence.__dict__, "confidence": assess(evidence)})


def test_the_body_names_the_tests_that_flipped_each_way() -> None:
    after = TestRun("pytest", 1, 1.0, "", 4, 1, failing=["tests/test_a.py::test_z"])
    body = pull_body(TASK, _evidence(after, fixed_tests=["tests/test_a.py::test_x", "tests/test_a.py::test_y"],
                                     broken_tests=["tests/test_a.py::test_z"]),
                     issue=None, qa=[], review_url=None, requested_by=None)
    assert "- fixed (fail → pass): `tests/test_a.py::test_x`, `tests/test_a.py::test_y`" in body
    assert "- broken (pass → fail): `tests/test_a.py::test_z`" in body
    assert "(tests/test_a.py::test_z)" in body  # the low-confidence reason names the failing test


def test_a_test_command_that_failed_before_any_test_says_why_and_is_not_an_agent_command() -> None:
    after = TestRun("pytest", 4, 0.2, "\x1b[31mERROR: /workspace/tox.ini:5: unexpected line: 'x'\x1b[0m\n")
    body = pull_body(TASK, _evidence(after), issue=None, qa=[], review_url=None, requested_by=None)
    assert "tests after: `pytest` — fail (exit 4) — no test reported" in body
    assert ("- the test command (tests after) failed before reporting any test: "
            "`ERROR: /workspace/tox.ini:5: unexpected line: 'x'`") in body
    assert "1 command(s) run by the agent, 0 failed" in body
