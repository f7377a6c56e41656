"""Evidence about a run's result, and a confidence level drawn only from it.

The model's own opinion of its work is not evidence. What is: the project's
test command run on the base and on the result (each in a sandbox, the base
on a checkout the agent never touched), the lint command on the result, what
the diff touches, the agent's commands that failed, the assumptions it
stated, and how the run ended. :func:`assess` turns that into ``high``,
``medium`` or ``low`` with the reasons, each one a fact a reviewer can check.

The rules, the weakest finding deciding the level:

* **low** — the run did not finish; it changed nothing; there is no test
  command; the tests fail after the change; fewer tests pass than on the base;
  the only files changed to turn failing tests green are test files; a test
  that failed on the base is gone or skipped after (not seen passing: a
  deleted or skipped test is not a fixed one).
* **medium** — the tests passed already on the base and no test was added or
  changed (nothing shows the change is exercised); test files were changed
  along with the code; lint fails; the diff is large; the agent stated
  assumptions the task did not settle.
* **high** — none of the above, with tests passing after the change.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal, Protocol

from errand.tasks.testreport import Report, plain, read_output

__all__ = [
    "Changed",
    "Confidence",
    "Evidence",
    "TestRun",
    "assess",
    "changed_test_files",
    "failed_checks",
    "is_test_file",
    "moved_tests",
    "parse_counts",
]

Level = Literal["high", "medium", "low"]
_ORDER: dict[Level, int] = {"low": 0, "medium": 1, "high": 2}
LARGE_DIFF_LINES = 400
#: The failing tests a run keeps by name (the count says how many there were).
MAX_NAMED = 200
#: The lines of a failing check's output shown beside its verdict.
TAIL_LINES = 15
_TEST_PATTERNS = ("test_*.py", "*_test.py", "*_test.go", "*.test.[jt]s", "*.test.[jt]sx", "*.spec.[jt]s",
                  "*.spec.[jt]sx", "*Test.java", "*_spec.rb", "conftest.py")
_TEST_DIRS = ("test", "tests", "__tests__", "spec")


@dataclass(frozen=True)
class TestRun:
    """One run of a check command: its exit code (``None``: killed by its timeout), the counts
    and the failing tests' names its report or output gives (:mod:`errand.tasks.testreport`),
    and the tail of its output."""

    __test__ = False  # not a pytest test class, whatever its name

    command: str
    exit_code: int | None
    seconds: float
    output: str  # the tail
    passed: int | None = None
    failed: int | None = None
    cached: bool = False  # taken from the baseline cache, not run for this round
    failing: list[str] = field(default_factory=list)  # the failing tests' names, the first MAX_NAMED
    passing: list[str] | None = None  # the passing tests' names where the runner lists them
    source: str = "none"  # what the counts were read from: junit, tap, pytest, vitest, ...
    skipped: list[str] = field(default_factory=list)  # the skipped tests' names where the runner lists them

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    @property
    def reported_tests(self) -> bool:
        """Whether the run reported any test: without one, a failure is the command's, not a test's."""
        return bool(self.passed or self.failed or self.failing)

    def describe(self) -> str:
        counts = []
        if self.passed is not None:
            counts.append(f"{self.passed} passed")
        if self.failed:
            counts.append(f"{self.failed} failed")
        if not self.ok and not self.reported_tests:
            counts.append("no test reported")
        verdict = "pass" if self.ok else ("timed out" if self.exit_code is None else f"fail (exit {self.exit_code})")
        return f"{verdict}{' — ' + ', '.join(counts) if counts else ''}"

    def tail(self, lines: int = TAIL_LINES) -> str:
        """The output's last ``lines`` lines (trailing blank ones dropped), as a terminal shows them, uncoloured."""
        return "\n".join(plain(self.output).rstrip().split("\n")[-lines:])

    def cause(self) -> str:
        """The output's last line that says something (what a failing command said last)."""
        said = [line.strip() for line in plain(self.output).split("\n") if line.strip()]
        return said[-1] if said else ""

    def report(self) -> Report:
        return Report(self.passed, self.failed, tuple(self.failing),
                      None if self.passing is None else tuple(self.passing), self.source, tuple(self.skipped))

    @classmethod
    def of(cls, command: str, exit_code: int | None, seconds: float, output: str, report: Report) -> TestRun:
        return cls(command, exit_code, seconds, output, report.passed, report.failed,
                   failing=list(report.failing[:MAX_NAMED]),
                   passing=None if report.passing is None else list(report.passing), source=report.source,
                   skipped=list(report.skipped[:MAX_NAMED]))

    def stored(self) -> TestRun:
        """The run as evidence keeps it: without the passing tests' names (they served the flips)."""
        return replace(self, passing=None)


@dataclass(frozen=True)
class Confidence:
    level: Level
    reasons: list[str]


@dataclass(frozen=True)
class Evidence:
    """Everything a reviewer needs besides the diff itself; stored with the run."""

    exit_status: str
    exit_detail: str
    tests_before: TestRun | None
    tests_after: TestRun | None
    lint_after: TestRun | None
    files: list[dict[str, Any]]  # path, status, additions, deletions
    test_files: list[str]  # files the diff adds or changes that are tests
    additions: int
    deletions: int
    commands_run: int
    failed_commands: list[dict[str, Any]]  # command, exit_code; a check's also check, cause, tail
    assumptions: list[str]
    summary: str | None
    confidence: Confidence = field(default_factory=lambda: Confidence("low", ["not assessed"]))
    fixed_tests: list[str] = field(default_factory=list)  # failed on the base, pass after
    broken_tests: list[str] = field(default_factory=list)  # passed on the base, fail after
    gone_tests: list[str] = field(default_factory=list)  # failed on the base, not seen after: not fixed
    skipped_tests: list[str] = field(default_factory=list)  # failed on the base, skipped after: not fixed

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Evidence:
        runs = {key: TestRun(**data[key]) if data.get(key) else None
                for key in ("tests_before", "tests_after", "lint_after")}
        return cls(**{**data, **runs, "confidence": Confidence(**data["confidence"])})


def is_test_file(path: str) -> bool:
    parts = path.split("/")
    name = parts[-1]
    return any(fnmatch.fnmatch(name, pattern) for pattern in _TEST_PATTERNS) or any(
        part in _TEST_DIRS for part in parts[:-1])


class Changed(Protocol):
    """A file of a diff, as :class:`errand.repo.diff.FileChange` gives it."""

    @property
    def path(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def old_path(self) -> str | None: ...


def changed_test_files(files: Iterable[Changed]) -> list[str]:
    """The diff's test files: one moved counts wherever it went (out of the test paths too)."""
    return [f.path for f in files
            if f.status != "deleted" and (is_test_file(f.path) or is_test_file(f.old_path or ""))]


def moved_tests(files: Iterable[Changed]) -> dict[str, str]:
    """The test files the diff moved to a test file's name (old path to new), whose tests are
    followed there; one moved out of the test paths is not: its failing tests are gone."""
    return {f.old_path: f.path for f in files
            if f.old_path is not None and is_test_file(f.old_path) and is_test_file(f.path)}


def parse_counts(output: str) -> tuple[int | None, int | None]:
    """``(passed, failed)`` from a test runner's summary (TAP, pytest, unittest, jest, vitest,
    mocha, go test), or ``(None, None)`` when the output has no summary errand recognises.
    Escape sequences are removed first: a project that forces colour still reads as it ran."""
    report = read_output(output)
    return report.passed, report.failed


def failed_checks(*checks: tuple[str, TestRun | None]) -> list[dict[str, Any]]:
    """The test commands that failed without reporting a test (a broken config, a missing
    runner): failed commands, each with what it said last and the tail of its output."""
    return [{"command": run.command, "exit_code": run.exit_code, "check": label, "cause": run.cause(),
             "tail": run.tail()}
            for label, run in checks if run is not None and not run.ok and not run.reported_tests]


def assess(evidence: Evidence) -> Confidence:
    """The confidence level and its reasons (see the module docstring for the rules)."""
    findings: list[tuple[Level, str]] = []
    findings += _run_findings(evidence)
    findings += _test_findings(evidence)
    findings += _review_findings(evidence)
    level: Level = min((lvl for lvl, _ in findings), key=_ORDER.__getitem__, default="high")
    reasons = [reason for lvl, reason in sorted(findings, key=lambda item: _ORDER[item[0]])]
    return Confidence(level, reasons)


def _run_findings(evidence: Evidence) -> list[tuple[Level, str]]:
    findings: list[tuple[Level, str]] = []
    if evidence.exit_status != "finished":
        findings.append(("low", f"the run did not finish ({evidence.exit_status}): {evidence.exit_detail}"))
    if not evidence.files:
        findings.append(("low", "the run changed no file"))
    return findings


def _test_findings(evidence: Evidence) -> list[tuple[Level, str]]:
    before, after = evidence.tests_before, evidence.tests_after
    if after is None:
        return [("low", "no test command is configured ([test] command in errand.toml), so nothing checked "
                        "the change")]
    if not after.ok:
        return [("low", f"the tests fail after the change: {after.describe()}{_named(after.failing)}")]
    findings: list[tuple[Level, str]] = []
    if before is not None and before.passed is not None and after.passed is not None and after.passed < before.passed:
        findings.append(("low", f"fewer tests pass than on the base ({before.passed} → {after.passed})"))
    code_files = [f["path"] for f in evidence.files if f["path"] not in evidence.test_files]
    unfixed = _unfixed(evidence)
    if unfixed:
        findings.append(("low", unfixed))
    if before is not None and not before.ok:
        if unfixed:
            pass  # the tests pass after, but not because every failing one was fixed
        elif evidence.test_files and not code_files:
            findings.append(("low", "the failing tests were made to pass by changing only test files: "
                                    + ", ".join(evidence.test_files)))
        else:
            findings.append(("high", f"the tests failed on the base ({before.describe()}) and pass after the "
                                     f"change ({after.describe()})"))
    else:
        findings.append(("high", f"the tests pass after the change ({after.describe()})"))
        if not evidence.test_files:
            findings.append(("medium", "the tests passed on the base too and no test was added or changed, so "
                                       "nothing shows the change is exercised"))
    if evidence.test_files and code_files and before is not None and not before.ok:
        findings.append(("medium", "test files were changed along with the code; check the tests were not "
                                   "weakened: " + ", ".join(evidence.test_files)))
    return findings


def _unfixed(evidence: Evidence) -> str:
    """Why the tests that failed on the base are not all fixed, though the run passes: some are
    gone or skipped after ("" when none is)."""
    parts = []
    if evidence.gone_tests:
        parts.append(f"{len(evidence.gone_tests)} gone (was failing){_named(evidence.gone_tests)}")
    if evidence.skipped_tests:
        parts.append(f"{len(evidence.skipped_tests)} skipped (was failing){_named(evidence.skipped_tests)}")
    if not parts:
        return ""
    return ("tests that failed on the base were not seen passing after: " + "; ".join(parts)
            + " — a deleted or skipped test is not a fixed one")


def _named(names: list[str], shown: int = 5) -> str:
    if not names:
        return ""
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return " (" + ", ".join(names[:shown]) + more + ")"


def _review_findings(evidence: Evidence) -> list[tuple[Level, str]]:
    findings: list[tuple[Level, str]] = []
    if evidence.lint_after is not None and not evidence.lint_after.ok:
        findings.append(("medium", f"lint fails after the change: {evidence.lint_after.describe()}"))
    if evidence.test_files and evidence.tests_before is not None and evidence.tests_before.ok:
        findings.append(("high", "tests were added or changed: " + ", ".join(evidence.test_files)))
    lines = evidence.additions + evidence.deletions
    if lines > LARGE_DIFF_LINES:
        findings.append(("medium", f"the diff is large ({lines} changed lines); review it in parts"))
    if evidence.assumptions:
        findings.append(("medium", f"the agent made {len(evidence.assumptions)} assumption"
                                   f"{'s' if len(evidence.assumptions) != 1 else ''} the task did not settle"))
    return findings
