"""How the grader reads a run: escapes removed before any parsing, and pytest's own summary line, in colour
or not, read as the JUnit report and the exit status tell it (test_summary, test_agreement and test_patches
hold the parsers' own tests)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from errand._text import strip_escapes
from errand.eval.agreement import disagreement
from errand.eval.junit import parse_junit
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
