"""Reading which tests ran and how they ended, from what the runners print and write when run
here: vitest with colour forced, node-tap and a plain TAP producer, pytest's JUnit report."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from errand.tasks.evidence import parse_counts
from errand.tasks.testreport import Flips, Report, flips, read_junit, read_output

VITEST_FILE = """\
import { describe, it, expect } from 'vitest'
describe('math', () => {
  it('adds', () => { expect(1 + 1).toBe(2) })
  it('subtracts', () => { expect(3 - 1).toBe(1) })
  it('multiplies', () => { expect(2 * 3).toBe(6) })
})
"""

TAP_FILE = """\
import t from 'tap'
t.test('adds', async t => { t.equal(1 + 1, 2) })
t.test('subtracts', async t => { t.equal(3 - 1, 1) })
"""

MOCHA_FILE = """\
import assert from 'node:assert'
describe('withTax', () => {
  it('rounds to whole cents', () => { assert.strictEqual(Math.round(999 * 1.0825), 1080) })
  describe('at a zero rate', () => {
    it('keeps the price', () => { assert.strictEqual(999 * 1, 999) })
  })
})
"""


def _run(cwd: Path, *command: str, **env: str) -> str:
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=600, env={**os.environ, **env})
    return done.stdout + done.stderr


@pytest.fixture(scope="module")
def node_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """vitest, node-tap and mocha installed from the registry npm is configured with, and a test file for each."""
    root = tmp_path_factory.mktemp("node-runners")
    (root / "package.json").write_text('{"name": "runners", "version": "1.0.0", "private": true, "type": "module"}\n')
    (root / "test").mkdir()
    (root / "test/math.test.js").write_text(VITEST_FILE)
    (root / "test/t.tap.mjs").write_text(TAP_FILE)
    (root / "test/m.spec.mjs").write_text(MOCHA_FILE)
    subprocess.run(["npm", "install", "--no-audit", "--no-fund", "vitest@3", "tap@21", "mocha@11"], cwd=root,
                   check=True, capture_output=True, timeout=900)
    return root


@pytest.mark.slow
@pytest.mark.network
def test_vitest_s_coloured_summary_counts_and_names_the_failing_test(node_project: Path) -> None:
    output = _run(node_project, "npx", "vitest", "run", "test/math.test.js", FORCE_COLOR="1")
    assert "\x1b[" in output  # the colour is there to read through
    report = read_output(output)
    assert (report.source, report.passed, report.failed) == ("vitest", 2, 1), output
    assert report.failing == ("test/math.test.js > math > subtracts",), output


@pytest.mark.slow
@pytest.mark.network
def test_node_tap_s_ok_lines_read_as_tap_not_as_go(node_project: Path) -> None:
    for output in (_run(node_project, "npx", "tap", "test/t.tap.mjs", CI="1"),  # the runner, as in a sandbox
                   _run(node_project, "node", "test/t.tap.mjs")):  # the file alone: plain TAP
        report = read_output(output)
        assert (report.source, report.passed, report.failed) == ("tap", 1, 1), output
        assert parse_counts(output) == (1, 1)
        assert [name.rpartition("subtracts")[1:] for name in report.failing] == [("subtracts", " > should be equal")]
        assert report.passing is not None and [p.endswith("adds > should be equal") for p in report.passing] == [True]


@pytest.mark.slow
@pytest.mark.network
def test_mocha_s_coloured_failure_list_names_the_test_by_its_titles(node_project: Path) -> None:
    output = _run(node_project, "npx", "mocha", "test/m.spec.mjs", FORCE_COLOR="1")
    assert "\x1b[" in output
    report = read_output(output)
    assert (report.source, report.passed, report.failed) == ("mocha", 1, 1), output
    assert report.failing == ("withTax rounds to whole cents",), output


def test_pytest_s_junit_report_names_tests_as_pytest_does(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests/test_money.py").write_text(
        "import pytest\n\n\nclass TestCents:\n    def test_kept(self):\n        assert round(0.1 + 0.2, 2) == 0.3\n\n"
        "    @pytest.mark.parametrize('n', [1, 2])\n    def test_even(self, n):\n        assert n % 2 == 0\n\n\n"
        "def test_plain():\n    pass\n")
    report_path = tmp_path / "report.xml"
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTEST_ADDOPTS": f"--junitxml={report_path} -o junit_family=xunit1"})
    report = read_junit(report_path.read_bytes())
    assert report is not None, done.stdout
    assert report.failing == ("tests/test_money.py::TestCents::test_even[1]",)
    assert report.passing == ("tests/test_money.py::TestCents::test_kept",
                              "tests/test_money.py::TestCents::test_even[2]", "tests/test_money.py::test_plain")
    assert read_output(done.stdout).failing == report.failing  # the printed short summary names it alike


def test_flips_each_way_and_only_where_a_run_says_so() -> None:
    before = Report(2, 2, ("a", "b"), ("c", "d"), "junit")
    after = Report(3, 1, ("c",), ("a", "d", "e"), "junit")
    assert flips(before, after) == Flips(("a",), ("c",), gone=("b",))  # e is new, not broken
    # A run that lists only its failures: the tests it stopped naming are fixed when as many more pass.
    assert flips(Report(1, 2, ("a", "b")), Report(3, 0)) == Flips(("a", "b"), ())
    # A run that reported no test at all fixed nothing.
    assert flips(before, Report(None, None)) == Flips((), ())


def test_a_failing_test_whose_file_the_diff_moved_is_followed_to_its_new_name() -> None:
    # A fix that also renamed the test file read "1 gone (was failing)", and its confidence low.
    renames = {"tests/test_old.py": "tests/test_calc.py", "lib/x.py": "lib/y.py"}
    before = Report(1, 2, ("tests/test_old.py::test_add", "tests/test_old.py::test_sub"),
                    ("tests/test_old.py::test_mul",), "junit")
    after = Report(2, 1, ("tests/test_calc.py::test_sub",), ("tests/test_calc.py::test_add",
                                                              "tests/test_calc.py::test_mul"), "junit")
    assert flips(before, after) == Flips((), (), gone=before.failing)  # without the renames
    assert flips(before, after, renames) == Flips(("tests/test_calc.py::test_add",), ())
    # unittest's and pytest's module form, and a name that only looks like the old one
    module = Report(0, 2, ("tests.test_old.TestCalc.test_add", "tests.test_older.test_x"), (), "unittest")
    moved = Report(1, 1, ("tests.test_older.test_x",), ("tests.test_calc.TestCalc.test_add",), "unittest")
    assert flips(module, moved, renames) == Flips(("tests.test_calc.TestCalc.test_add",), ())
    # Moved and deleted: gone all the same.
    assert flips(before, Report(1, 0, (), ("tests/test_calc.py::test_mul",), "junit"), renames).gone == (
        "tests/test_calc.py::test_add", "tests/test_calc.py::test_sub")


def test_a_failing_test_deleted_or_skipped_is_not_fixed() -> None:
    # Printed summaries name only failures: the failing test went and no more tests pass.
    assert flips(Report(3, 1, ("t.test_x",), source="unittest"), Report(3, 0, source="unittest")) == \
        Flips((), (), gone=("t.test_x",))
    # JUnit: failing before, skipped after, is named as such; one not in the report at all is gone.
    before = read_junit(JUNIT.format(x='<failure message="no"/>', y='<failure message="no"/>').encode())
    after = read_junit(JUNIT.format(x='<skipped message="later"/>', y="").replace(
        '<testcase classname="tests.test_a" name="test_y" file="tests/test_a.py"></testcase>', "").encode())
    assert before is not None and after is not None and after.skipped == ("tests/test_a.py::test_x",)
    assert flips(before, after) == Flips((), (), gone=("tests/test_a.py::test_y",),
                                         skipped=("tests/test_a.py::test_x",))
    # TAP names a skip by its directive.
    tap = read_output("TAP version 14\nok 1 - adds\nok 2 - subtracts # SKIP later\n1..2\n")
    assert (tap.passing, tap.skipped) == (("adds",), ("subtracts",))
    assert flips(Report(1, 1, ("subtracts",), ("adds",), "tap"), tap).skipped == ("subtracts",)


JUNIT = ('<testsuites><testsuite name="pytest">'
         '<testcase classname="tests.test_a" name="test_x" file="tests/test_a.py">{x}</testcase>'
         '<testcase classname="tests.test_a" name="test_y" file="tests/test_a.py">{y}</testcase>'
         '<testcase classname="tests.test_a" name="test_z" file="tests/test_a.py"></testcase>'
         '</testsuite></testsuites>')

# Python 3.10 and earlier name only the class in the parentheses.
UNITTEST_310 = """\
FF.
======================================================================
FAIL: test_one (tests.test_money.TestCents)
----------------------------------------------------------------------
AssertionError: 1 != 2

======================================================================
FAIL: test_two (tests.test_money.TestCents)
----------------------------------------------------------------------
AssertionError: 3 != 4

----------------------------------------------------------------------
Ran 3 tests in 0.001s

FAILED (failures=2)
"""


def test_unittest_names_each_failure_on_every_python() -> None:
    report = read_output(UNITTEST_310)
    assert (report.source, report.passed, report.failed) == ("unittest", 1, 2)
    assert report.failing == ("tests.test_money.TestCents.test_one", "tests.test_money.TestCents.test_two")
    newer = re.sub(r"^(FAIL: (\w+) \(tests\.test_money\.TestCents)\)", r"\1.\2)", UNITTEST_310, flags=re.MULTILINE)
    assert "FAIL: test_one (tests.test_money.TestCents.test_one)" in newer  # as 3.11 and later print it
    assert read_output(newer).failing == report.failing


def test_unittest_verbose_lists_its_passing_and_skipped_tests(tmp_path: Path) -> None:
    (tmp_path / "test_money.py").write_text(
        "import unittest\n\n\nclass TestCents(unittest.TestCase):\n    def test_kept(self):\n        pass\n\n"
        "    def test_doc(self):\n        \"\"\"Says what it checks.\"\"\"\n\n"
        "    @unittest.skip('later')\n    def test_later(self):\n        pass\n\n"
        "    def test_bad(self):\n        self.assertEqual(1, 2)\n")
    done = subprocess.run([sys.executable, "-m", "unittest", "-v"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    report = read_output(done.stderr)
    assert (report.source, report.passed, report.failed) == ("unittest", 2, 1), done.stderr
    assert report.failing == ("test_money.TestCents.test_bad",)
    assert report.passing is not None and sorted(report.passing) == ["test_money.TestCents.test_doc",
                                                                      "test_money.TestCents.test_kept"], done.stderr
    assert report.skipped == ("test_money.TestCents.test_later",)


def _junit_of(project: Path) -> Report:
    report = project / "report.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}",
                    "-o", "junit_family=xunit1"], cwd=project, capture_output=True, check=False)
    read = read_junit(report.read_bytes())
    assert read is not None
    return read


@pytest.mark.slow
def test_a_test_file_that_failed_to_import_and_runs_after_is_fixed_not_gone(tmp_path: Path) -> None:
    """A real pytest's JUnit names a file that cannot import by its module (tests/test_mean.py::
    tests.test_mean); once the fix lets it import, its tests are named one by one. That file is
    fixed, not a failing test gone (found by the fresh-clone run: a real fix read as low confidence)."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "__init__.py").write_text("")
    (tmp_path / "tests" / "test_mean.py").write_text("from stats import mean\n\n\ndef test_mean():\n"
                                                     "    assert mean([1, 2, 3]) == 2\n")
    before = _junit_of(tmp_path)
    assert before.failing == ("tests/test_mean.py::tests.test_mean",)
    (tmp_path / "stats.py").write_text("def mean(values):\n    return sum(values) / len(values)\n")
    fixed = flips(before, _junit_of(tmp_path))
    assert fixed.fixed == ("tests/test_mean.py::tests.test_mean",) and not fixed.gone
    (tmp_path / "tests" / "test_mean.py").write_text("from stats import mean\n\n\ndef test_mean():\n"
                                                     "    assert mean([1, 2, 3]) == 2\n\n\ndef test_more():\n"
                                                     "    assert False\n")
    half = flips(before, _junit_of(tmp_path))  # the file imports, but one of its tests fails
    assert not half.fixed and half.gone == ("tests/test_mean.py::tests.test_mean",)
