"""Which tests a test command ran, and how each ended: read from the runner's machine-readable
report where it wrote one, else from the summary it printed.

pytest writes a JUnit XML report when asked (errand asks through ``PYTEST_ADDOPTS``, see
:func:`report_request`); TAP (node-tap, ``node --test``, tape, prove) is machine-readable
as printed. Other runners' output is read for their summary: pytest's and unittest's, jest's,
vitest's, mocha's and ``go test``'s. Output is always read as a terminal shows it (escape
sequences removed, a carriage return's redraw collapsed: :mod:`errand._terminal`), so a
project that forces colour reads as it ran.

A :class:`Report` holds counts and the names of the failing tests, and the passing (and
skipped) tests' names when the runner lists them (a JUnit report, TAP, verbose output): only
then can a before/after comparison say for certain which tests flipped (:func:`flips`). A test
that failed before is *fixed* only when it is seen passing after — by name, or, where the runner
prints only its failures, by the passing count rising as much; else it is *gone* (deleted,
renamed, not run) or *skipped*, and neither is a fix.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Literal, NamedTuple

from errand._terminal import decode_line
from errand._text import strip_escapes

__all__ = ["MAX_REPORT_BYTES", "Case", "Flips", "Report", "flips", "junit_cases", "plain", "read_junit", "read_output",
           "renamed_test", "report_request"]

Outcome = Literal["passed", "failed", "error", "skipped"]
#: A report larger than this is not read (the output's summary is used instead).
MAX_REPORT_BYTES = 32 * 1024 * 1024


@dataclass(frozen=True)
class Case:
    """One test case of a JUnit report."""

    classname: str
    name: str
    file: str | None
    outcome: Outcome

    @property
    def test_id(self) -> str:
        """pytest's node id when the report gives the file (``tests/test_a.py::TestX::test_y``),
        else ``classname::name``."""
        if self.file and self.file.endswith(".py"):
            module = self.file.removesuffix(".py").replace("/", ".")
            inner = self.classname[len(module) + 1:] if self.classname.startswith(module + ".") else ""
            return "::".join(part for part in (self.file, inner, self.name) if part)
        return f"{self.classname}::{self.name}" if self.classname else self.name


@dataclass(frozen=True)
class Report:
    """Counts (``None``: not reported) and test names, as read by ``source``."""

    passed: int | None
    failed: int | None
    failing: tuple[str, ...] = ()
    passing: tuple[str, ...] | None = None  # None: the runner did not list them
    source: str = "none"
    skipped: tuple[str, ...] = ()  # the skipped tests' names, where the runner lists them


NOTHING = Report(None, None)


def report_request(path: str) -> dict[str, str]:
    """The environment that asks a test command's pytest (run directly or through a script that
    keeps its environment) for a JUnit report at ``path``; other programs ignore it. A
    ``--junitxml`` on the command line itself wins, and then the output is read instead."""
    return {"PYTEST_ADDOPTS": f"--junitxml={path} -o junit_family=xunit1"}


# ------------------------------------------------------------------ JUnit XML


def junit_cases(xml: bytes) -> list[Case]:
    """Every test case of a JUnit report, in order; a report that is not XML has none. External
    entities are never fetched: ElementTree does not resolve them."""
    try:
        root = ElementTree.fromstring(xml)
    except ElementTree.ParseError:
        return []
    cases = []
    for case in root.iter("testcase"):
        tags = {child.tag for child in case}
        outcome: Outcome = ("error" if "error" in tags else "failed" if "failure" in tags
                            else "skipped" if "skipped" in tags else "passed")
        cases.append(Case(case.get("classname", ""), case.get("name", ""), case.get("file"), outcome))
    return cases


def read_junit(xml: bytes) -> Report | None:
    """A JUnit report's counts and names; ``None`` when it names no test case. A test reported
    twice (an error in teardown after a pass) counts once, with its worse outcome."""
    outcomes: dict[str, Outcome] = {}
    for case in junit_cases(xml):
        if outcomes.get(case.test_id) in ("failed", "error") and case.outcome in ("passed", "skipped"):
            continue
        outcomes[case.test_id] = case.outcome
    if not outcomes:
        return None
    failing = tuple(name for name, outcome in outcomes.items() if outcome in ("failed", "error"))
    passing = tuple(name for name, outcome in outcomes.items() if outcome == "passed")
    skipped = tuple(name for name, outcome in outcomes.items() if outcome == "skipped")
    return Report(len(passing), len(failing), failing, passing, "junit", skipped)


# ------------------------------------------------------------------ printed output


def plain(output: str) -> str:
    """``output`` as a terminal shows it, without its colours: escapes removed, a line redrawn
    after a carriage return read as its last state."""
    return "\n".join(_plain_line(line.removesuffix("\r")) for line in output.split("\n"))


_REDRAWN = re.compile(r"[\r\b]|\x1b\[[0-9;]*K")


def _plain_line(line: str) -> str:
    # Only a line that redraws itself needs the terminal's cell by cell decoding; the rest (nearly
    # all, and a test suite can print megabytes) lose their escapes in one pass.
    if _REDRAWN.search(line):
        return "".join(run.text for run in decode_line(line)[0])
    return strip_escapes(line)


def read_output(output: str) -> Report:
    """Counts and names from a runner's printed summary (see the module), or :data:`NOTHING`."""
    text = plain(output)
    for reader in _READERS:
        if (report := reader(text)) is not None:
            return report
    return NOTHING


def _unique(names: list[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(names))


_TAP_POINT = re.compile(r"^( *)(not ok|ok)\b(?: +\d+)?(?: +-)?(?: +(.*?))?\s*$")
_TAP_DIRECTIVE = re.compile(r"\s+#\s*(skip|todo)\b.*$", re.IGNORECASE)
_TAP_TIME = re.compile(r"\s+#\s*time=\S+$")
_TAP_SUBTEST = re.compile(r"^( *)# Subtest: (.*)$")
_TAP_PLAN = re.compile(r"^ *(\d+)\.\.(\d+)\b", re.MULTILINE)
_NODE_TAP_SUMMARY = re.compile(r"^# \{ total: (\d+), pass: (\d+)(?:, fail: (\d+))?", re.MULTILINE)
_TAP_COUNT = re.compile(r"^# (pass|fail)\s+(\d+)\s*$", re.MULTILINE)


def _tap(text: str) -> Report | None:
    """TAP 13/14 with indented subtests. Each point whose own subtests are not points is a test,
    named by the path of its parents (``test/a.mjs > adds > should be equal``)."""
    if not _TAP_PLAN.search(text) or not re.search(r"^ *(?:not )?ok \d+", text, re.MULTILINE):
        return None
    points: list[tuple[int, bool, str, str]] = []  # indent, ok, name, kind
    for line in text.splitlines():
        if match := _TAP_POINT.match(line):
            name = _TAP_TIME.sub("", match.group(3) or "")
            directive = _TAP_DIRECTIVE.search(name)
            name = _TAP_DIRECTIVE.sub("", name)
            points.append((len(match.group(1)), match.group(2) == "ok" or directive is not None, name,
                           "skip" if directive else "test"))
    failing: list[str] = []
    passing: list[str] = []
    skipped: list[str] = []
    for index, (indent, ok, name, kind) in enumerate(points):
        # A parent's point follows its children's (TAP 14): a point after deeper ones encloses them.
        if index > 0 and points[index - 1][0] > indent:
            continue
        enclosing = _enclosing(points, index)
        full = " > ".join([*enclosing, name]) if name else " > ".join(enclosing) or f"test {index + 1}"
        (skipped if kind == "skip" else passing if ok else failing).append(full)
    report = Report(len(passing), len(failing), _unique(failing), _unique(passing), "tap", _unique(skipped))
    if summary := _NODE_TAP_SUMMARY.search(text):
        return replace(report, passed=int(summary.group(2)), failed=int(summary.group(3) or 0))
    counts = dict((kind, int(n)) for kind, n in _TAP_COUNT.findall(text))
    if "pass" in counts:
        return replace(report, passed=counts["pass"], failed=counts.get("fail", 0))
    return report


def _enclosing(points: list[tuple[int, bool, str, str]], index: int) -> list[str]:
    """The names of the parent points of ``points[index]``: the next point at each smaller indent."""
    names, indent = [], points[index][0]
    for later_indent, _ok, name, _kind in points[index + 1:]:
        if later_indent < indent:
            names.append(name)
            indent = later_indent
    return names[::-1]


_PYTEST_SUMMARY = re.compile(r"(\d+) (passed|failed|errors?)\b")
_PYTEST_NAMED = re.compile(r"^(FAILED|ERROR) (\S+::\S+|\S+\.py)(?: - .*)?$", re.MULTILINE)
_PYTEST_VERBOSE = re.compile(r"^(\S+::\S+) (PASSED|FAILED|ERROR|SKIPPED)\b", re.MULTILINE)


def _pytest(text: str) -> Report | None:
    summary = [line for line in text.splitlines() if _PYTEST_SUMMARY.search(line) and " in " in line]
    if not summary:
        return None
    counts = {"passed": 0, "failed": 0}
    for n, kind in _PYTEST_SUMMARY.findall(summary[-1]):
        counts["passed" if kind == "passed" else "failed"] += int(n)
    failing = [name for _kind, name in _PYTEST_NAMED.findall(text)]
    verbose = _PYTEST_VERBOSE.findall(text)
    failing += [name for name, outcome in verbose if outcome in ("FAILED", "ERROR")]
    passing = _unique([name for name, outcome in verbose if outcome == "PASSED"])
    skipped = _unique([name for name, outcome in verbose if outcome == "SKIPPED"])
    listed = len(passing) == counts["passed"] and passing
    return Report(counts["passed"], counts["failed"], _unique(failing), passing if listed else None, "pytest",
                  skipped)


_UNITTEST_RAN = re.compile(r"^Ran (\d+) tests? in ", re.MULTILINE)
_UNITTEST_FAILED = re.compile(r"^FAILED \((.*)\)\s*$", re.MULTILINE)
_UNITTEST_NAMED = re.compile(r"^(?:FAIL|ERROR): (\w+) \(([\w.]+)\)", re.MULTILINE)
_UNITTEST_OUTCOMES = re.compile(r"^(?:OK|FAILED) \((.*)\)\s*$", re.MULTILINE)
# ``-v``: ``test_x (mod.Class.test_x) ... ok``, a docstring's first line maybe on the next line.
_UNITTEST_VERBOSE = re.compile(r"^(\w+) \(([\w.]+)\)(?:\n[^\n]*?)? \.\.\. (ok|FAIL|ERROR|skipped\b)",
                               re.MULTILINE)


def _unittest_name(name: str, qualified: str) -> str:
    """``mod.Class.test_x``: Python 3.11 and later print that in the parentheses, earlier ones
    only ``mod.Class`` (two failures of one class would read as one)."""
    return qualified if qualified.endswith("." + name) else f"{qualified}.{name}"


def _unittest(text: str) -> Report | None:
    if not (ran := _UNITTEST_RAN.search(text)):
        return None
    failed = skipped = 0
    if outcomes := _UNITTEST_OUTCOMES.search(text, ran.end()):
        failed = sum(int(n) for n in re.findall(r"(?:failures|errors)=(\d+)", outcomes.group(1)))
        skipped = sum(int(n) for n in re.findall(r"skipped=(\d+)", outcomes.group(1)))
    failing = [_unittest_name(name, qualified) for name, qualified in _UNITTEST_NAMED.findall(text)]
    verbose = [(_unittest_name(name, qualified), outcome)
               for name, qualified, outcome in _UNITTEST_VERBOSE.findall(text)]
    passed = int(ran.group(1)) - failed - skipped
    passing = _unique([name for name, outcome in verbose if outcome == "ok"])
    listed = passing if passing and len(passing) == passed else None
    return Report(passed, failed, _unique(failing), listed, "unittest",
                  _unique([name for name, outcome in verbose if outcome == "skipped"]))


_JEST = re.compile(r"^Tests:\s+(.*)$", re.MULTILINE)
_JEST_NAMED = re.compile(r"^\s*● (.+?)\s*$", re.MULTILINE)
_VITEST = re.compile(r"^\s*Tests\s+(.*\(\d+\))\s*$", re.MULTILINE)
_VITEST_NAMED = re.compile(r"^\s*FAIL\s+(\S+ > .+?)\s*$", re.MULTILINE)


def _counted(summary: str) -> tuple[int, int]:
    counts = dict((kind, int(n)) for n, kind in re.findall(r"(\d+) (passed|failed)", summary))
    return counts.get("passed", 0), counts.get("failed", 0)


def _jest(text: str) -> Report | None:
    if not (match := _JEST.search(text)):
        return None
    passed, failed = _counted(match.group(1))
    named = [name for name in _JEST_NAMED.findall(text) if name not in ("Test suite failed to run", "Console")]
    return Report(passed, failed, _unique(named), None, "jest")


def _vitest(text: str) -> Report | None:
    if not (match := _VITEST.search(text)):
        return None
    passed, failed = _counted(match.group(1))
    return Report(passed, failed, _unique(_VITEST_NAMED.findall(text)), None, "vitest")


_MOCHA = re.compile(r"^\s*(\d+) (passing|failing)\b", re.MULTILINE)
_MOCHA_ENTRY = re.compile(r"^ +(\d+)\) (.+)$")


def _mocha(text: str) -> Report | None:
    if not (found := _MOCHA.findall(text)):
        return None
    counts = {kind: int(n) for n, kind in found}
    return Report(counts.get("passing", 0), counts.get("failing", 0), _mocha_failures(text), None, "mocha")


def _mocha_failures(text: str) -> tuple[str, ...]:
    """Mocha lists each failure as ``N) outer`` then the inner titles on the following lines, the
    last ending with a colon."""
    lines = text.split("\n")
    after = next((i for i, line in enumerate(lines) if re.match(r"^\s*\d+ failing\b", line)), None)
    names: list[str] = []
    if after is None:
        return ()
    index = after + 1
    while index < len(lines):
        if entry := _MOCHA_ENTRY.match(lines[index]):
            parts = [entry.group(2).strip()]
            while not parts[-1].endswith(":") and index + 1 < len(lines) and lines[index + 1].strip():
                index += 1
                parts.append(lines[index].strip())
            names.append(" ".join(parts).removesuffix(":"))
        index += 1
    return _unique(names)


_GO = re.compile(r"^\s*--- (PASS|FAIL): (\S+)", re.MULTILINE)
_GO_PACKAGE = re.compile(r"^(ok|FAIL)\s+\S+\s+(?:[\d.]+s|\(cached\))", re.MULTILINE)


def _go(text: str) -> Report | None:
    tests = _GO.findall(text)
    if not tests and not _GO_PACKAGE.search(text):
        return None
    passing = _unique([name for outcome, name in tests if outcome == "PASS"])
    failing = _unique([name for outcome, name in tests if outcome == "FAIL"])
    return Report(len(passing), len(failing), failing, passing or None, "go")


# TAP first: its ``ok 1 - …`` lines would otherwise read as ``go test``'s ``ok  pkg``; jest and
# vitest before pytest, whose summary shape (``N passed … in``) their lines can share.
_READERS: tuple[Callable[[str], Report | None], ...] = (_tap, _jest, _vitest, _unittest, _pytest, _mocha, _go)


# ------------------------------------------------------------------ before and after


class Flips(NamedTuple):
    """How the tests that failed before ended after, and which passing ones broke."""

    fixed: tuple[str, ...]  # failed before, seen passing after
    broken: tuple[str, ...]  # passed before, fail after
    gone: tuple[str, ...] = ()  # failed before, not seen after (deleted, renamed, not run): not fixed
    skipped: tuple[str, ...] = ()  # failed before, skipped after: not fixed


def _module_runs(name: str, after: Report) -> bool:
    """Whether ``name`` is a whole test file's error (pytest names a file that failed to import
    by the file's module: ``tests/test_a.py::tests.test_a``) and, after, the file's tests ran and
    passed, none failing: the file was fixed, its tests named only now."""
    file, _, rest = name.partition("::")
    if not file.endswith(".py") or rest != file.removesuffix(".py").replace("/", "."):
        return False
    inside = file + "::"
    return any(p.startswith(inside) for p in after.passing or ()) and not any(
        f.startswith(inside) for f in after.failing)


def renamed_test(name: str, renames: Mapping[str, str]) -> str:
    """``name`` as it is called after its file moved (``renames``: old path to new, as the diff
    gives them): ``tests/a.py::test_x`` or pytest's module form ``tests.a.TestX``; else as it is."""
    file, sep, rest = name.partition("::")
    if sep and file in renames:
        return renames[file] + sep + rest
    for old, new in renames.items():
        if old.endswith(".py") and new.endswith(".py"):
            module, moved = old.removesuffix(".py").replace("/", "."), new.removesuffix(".py").replace("/", ".")
            if name == module or name.startswith(module + "."):
                return moved + name[len(module):]
    return name


def flips(before: Report, after: Report, renames: Mapping[str, str] | None = None) -> Flips:
    """The tests that flipped each way (:class:`Flips`). A test that failed before is fixed only
    when it is seen passing after: by name where the run lists its passing tests (its new name
    where the diff moved its file: ``renames``), else (a runner that prints only failures) when
    the passing count rose by at least as many as stopped being named. One that is neither
    failing, passing nor skipped after is gone. Where a run did not list its passing tests, a
    test it did not name as failing is read as having passed before (so a new test failing
    after reads as broken)."""
    if after.passed is None and not after.failing:
        return Flips((), ())  # a run that reported no test at all says nothing of any
    if renames:
        before = replace(before, failing=tuple(renamed_test(name, renames) for name in before.failing),
                         passing=None if before.passing is None else
                         tuple(renamed_test(name, renames) for name in before.passing),
                         skipped=tuple(renamed_test(name, renames) for name in before.skipped))
    unnamed = [name for name in before.failing if name not in after.failing and name not in after.skipped]
    if after.passing is not None:
        fixed = tuple(name for name in unnamed if name in after.passing or _module_runs(name, after))
    else:
        rose = (after.passed or 0) - (before.passed or 0)
        fixed = tuple(unnamed) if unnamed and rose >= len(unnamed) else ()
    gone = tuple(name for name in unnamed if name not in fixed)
    skipped = tuple(name for name in before.failing if name in after.skipped and name not in after.failing)

    def passed_before(name: str) -> bool:
        if before.passing is not None:
            return name in before.passing
        return before.passed is not None and name not in before.failing

    broken = tuple(name for name in after.failing if passed_before(name))
    return Flips(fixed, broken, gone, skipped)
