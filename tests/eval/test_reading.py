"""How the grader reads a run: escapes removed before any parsing, pytest's own summary line, the
three accounts held against each other, and which paths of a patch decide how tests run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from errand._text import strip_escapes
from errand.eval.agreement import disagreement
from errand.eval.junit import parse_junit
from errand.eval.patches import command_paths, runner_path
from errand.eval.summary import parse_summary
from errand.tasks.evidence import parse_counts

VITEST_COLOURED = ("\x1b[2m Test Files \x1b[22m \x1b[1m\x1b[31m1 failed\x1b[39m\x1b[22m\x1b[2m | \x1b[22m\x1b[1m"
                   "\x1b[32m1 passed\x1b[39m\x1b[22m\x1b[90m (2)\x1b[39m\n"
                   "\x1b[2m      Tests \x1b[22m \x1b[1m\x1b[31m1 failed\x1b[39m\x1b[22m\x1b[2m | \x1b[22m\x1b[1m"
                   "\x1b[32m3 passed\x1b[39m\x1b[22m\x1b[90m (4)\x1b[39m\n")


@pytest.mark.parametrize(("text", "plain"), [
    ("\x1b[31m\x1b[1m1 failed\x1b[0m, \x1b[32m2 passed\x1b[0m", "1 failed, 2 passed"),  # CSI (SGR)
    ("a\x1b]8;;https://example.invalid\x07link\x1b]8;;\x1b\\b", "alinkb"),  # OSC 8, ended by BEL and by ST
    ("\x1b]0;title never ended\nnext line", "\nnext line"),  # an open OSC ends at the line's end
    ("x\x1bPq#0;2;0;0;0\x1b\\y", "xy"),  # DCS
    ("\x1b7\x1b(B\x1bcsaved\x1b8", "saved"),  # two-character escapes
    ("lone \x1b", "lone "), ("\x9b31m8-bit\x9b0m", "8-bit"),  # a lone ESC, 8-bit CSI
    ("\x1b[?25l\x1b[2K\x1b[1Acursor", "cursor"),
    ("plain, ünïcödé and tabs\tstay", "plain, ünïcödé and tabs\tstay"),
])
def test_strip_escapes_removes_every_escape_sequence(text: str, plain: str) -> None:
    assert strip_escapes(text) == plain


@pytest.mark.faults
def test_parse_counts_reads_a_coloured_summary() -> None:
    assert parse_counts(VITEST_COLOURED) == (3, 1)


def _pytest_run(tmp_path: Path, *options: str) -> tuple[int, str, bytes]:
    (tmp_path / "test_money.py").write_text("def test_ok():\n    pass\n\n\ndef test_bad():\n    assert 1 == 2\n")
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *options,
                           f"--junitxml={tmp_path / 'junit.xml'}", "test_money.py"], cwd=tmp_path, capture_output=True,
                          text=True, env={"PATH": "/usr/bin:/bin", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
    return done.returncode, done.stdout, (tmp_path / "junit.xml").read_bytes()


@pytest.mark.parametrize("options", [("--color=yes",), ("--color=yes", "-q"), ("--color=no", "-q"), ()])
def test_pytests_summary_line_in_colour_or_not(tmp_path: Path, options: tuple[str, ...]) -> None:
    exit_code, output, report = _pytest_run(tmp_path, *options)
    summary = parse_summary(output)
    assert summary is not None and (summary["failed"], summary["passed"], summary.bad) == (1, 1, 1)
    assert disagreement(exit_code, parse_junit(report), summary) is None


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


def test_the_three_accounts_must_agree() -> None:
    one_failed = parse_summary("1 failed, 1 passed in 0.02s")
    both_passed = parse_summary("2 passed in 0.02s")
    failed = {("t", "a"): "passed", ("t", "b"): "failed"}
    passed = {("t", "a"): "passed", ("t", "b"): "passed"}
    assert disagreement(1, failed, one_failed) is None  # type: ignore[arg-type]
    assert disagreement(0, passed, both_passed) is None  # type: ignore[arg-type]
    silenced = disagreement(1, passed, one_failed)  # type: ignore[arg-type]
    assert silenced is not None and "the JUnit report that none did" in silenced
    assert disagreement(0, passed, one_failed) is not None  # type: ignore[arg-type]
    assert disagreement(1, failed, both_passed) is not None  # type: ignore[arg-type]
    assert disagreement(0, passed, None) is not None  # type: ignore[arg-type]
    padded = disagreement(0, {**passed, ("t", "c"): "passed"}, both_passed)  # type: ignore[arg-type]
    assert padded is not None and "3 passed tests" in padded
    assert disagreement(5, {}, parse_summary("no tests ran in 0.01s")) is None


@pytest.mark.parametrize(("path", "decides"), [
    ("pyproject.toml", True), ("sub/pytest.toml", True), (".pytest.toml", True), ("pytest.ini", True),
    ("tox.ini", True), ("setup.cfg", True), ("tests/unit/conftest.py", True), ("src/sitecustomize.py", True),
    ("usercustomize.py", True), ("anything.pth", True), ("x-1.0.dist-info/entry_points.txt", True),
    ("src/x.egg-info/entry_points.txt", True), ("__editable___x_finder.py", True), ("pytest/__main__.py", True),
    ("pytest/__init__.py", True), ("_pytest/__init__.py", True), ("pluggy.py", True), ("json.py", True),
    ("xml/__init__.py", True), ("../outside.py", True), ("src/pkg/__pycache__/core.cpython-311.pyc", True),
    ("src/pkg/core.pyc", True),
    ("src/pkg/core.py", False), ("tests/test_json.py", False), ("docs/types.txt", False), ("README.md", False),
    ("src/pkg/json.py", False), ("test/__init__.py", False),
])
def test_which_paths_decide_how_tests_run(path: str, decides: bool) -> None:
    assert runner_path(path) is decides


def test_the_files_a_test_command_names() -> None:
    assert command_paths(".venv/bin/python -m pytest -p no:cacheprovider -q {junit} {tests}") == {".venv/bin/python"}
    assert command_paths("PYTHONPATH=src python ./runtests.py --parallel=1") == {"runtests.py"}
    assert {"Makefile", "makefile", "GNUmakefile"} <= command_paths("make test")
