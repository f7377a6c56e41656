"""Per-test outcomes from a JUnit XML report (pytest's ``--junitxml``), named as SWE-bench
names tests: ``path/to/test_file.py::Class::test_name[param]``.

pytest's report names a test by ``classname`` (the module's dotted path, then any
classes) and ``name``; the file path is not in it. So a wanted test id is turned
into that pair (:func:`junit_key`) and looked up, rather than the report's pair
turned back into a path, which is ambiguous.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Literal

from errand.tasks.testreport import junit_cases

__all__ = ["Outcome", "junit_key", "outcomes", "parse_junit"]

Outcome = Literal["passed", "failed", "error", "skipped", "missing"]


def parse_junit(xml: bytes) -> dict[tuple[str, str], Outcome]:
    """``(classname, name) -> outcome`` for every test case of the report (read by the evidence's
    reader, :func:`errand.tasks.testreport.junit_cases`); a report that is not XML gives ``{}``
    (every wanted test then reads as missing)."""
    found: dict[tuple[str, str], Outcome] = {}
    for case in junit_cases(xml):
        key = (case.classname, case.name)
        # A test reported twice (an error in teardown after a pass) keeps its worse outcome.
        if found.get(key) in ("failed", "error") and case.outcome in ("passed", "skipped"):
            continue
        found[key] = case.outcome
    return found


def junit_key(test_id: str) -> tuple[str, str]:
    """The (classname, name) pytest's report gives ``test_id``."""
    parts = test_id.split("::")
    module = parts[0].removesuffix(".py").replace("/", ".")
    return ".".join([module, *parts[1:-1]]), parts[-1] if len(parts) > 1 else ""


def outcomes(report: Mapping[tuple[str, str], Outcome], wanted: Iterable[str]) -> dict[str, Outcome]:
    """The outcome of each wanted test id; ``missing`` when the report does not name it."""
    return {test_id: report.get(junit_key(test_id), "missing") for test_id in wanted}
