"""The test runner's own account of a run: pytest's last summary line (``1 failed, 2 passed in
0.12s``), read from its output with every escape sequence removed first.

The grader holds it against the exit status and the JUnit report
(:mod:`errand.eval.agreement`): code under test that silences one of them cannot
silence the other two by the same stroke.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from errand._text import strip_escapes

__all__ = ["Summary", "parse_summary"]

# "==== 1 failed, 2 passed, 1 warning in 0.12s (0:00:00) ====", "-q" without the rules,
# "no tests ran in 0.01s". pytest 9's subtests count "2 subtests passed": kept apart.
_LINE = re.compile(r"^=*\s*(?P<stats>.+?) in \d+(?:\.\d+)?s(?: \([\d:.]+\))?\s*=*\s*$")
_PART = re.compile(r"^(?P<count>\d+) (?P<kind>[a-z][a-z ]*)$")
_KINDS = {"passed": "passed", "failed": "failed", "error": "errors", "errors": "errors", "skipped": "skipped",
          "xfailed": "xfailed", "xpassed": "xpassed", "deselected": "deselected", "warning": "warnings",
          "warnings": "warnings", "rerun": "rerun", "subtests passed": "subtests passed",
          "subtests failed": "subtests failed", "subtests skipped": "subtests skipped"}


@dataclass(frozen=True)
class Summary:
    """The counts of pytest's summary line, by kind (``passed``, ``failed``, ``errors``, …)."""

    counts: dict[str, int]
    line: str

    def __getitem__(self, kind: str) -> int:
        return self.counts.get(kind, 0)

    @property
    def bad(self) -> int:
        """Failures and errors: what makes pytest exit 1."""
        return self["failed"] + self["errors"] + self["subtests failed"]


def parse_summary(output: str) -> Summary | None:
    """The last summary line of ``output``, or None when there is none (``-qq`` prints none)."""
    for line in reversed(strip_escapes(output).splitlines()):
        match = _LINE.match(line.strip())
        if match is None:
            continue
        counts = _counts(match.group("stats"))
        if counts is not None:
            return Summary(counts, line.strip())
    return None


def _counts(stats: str) -> dict[str, int] | None:
    if stats == "no tests ran":
        return {}
    counts: Counter[str] = Counter()
    for part in stats.split(", "):
        match = _PART.match(part)
        if match is None or match.group("kind") not in _KINDS:
            return None
        counts[_KINDS[match.group("kind")]] += int(match.group("count"))
    return dict(counts)
