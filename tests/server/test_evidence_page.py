"""Evidence that says why, on the faces a person reads it on (``errand show`` and the review
page): a pytest project whose config forces colour, where a change flips tests by name both
ways, and a change that breaks the test command before any test runs."""

from __future__ import annotations

import html
import json
import re
import subprocess
from pathlib import Path

import pytest

from engine.cli import errand, script, stop_worker
from engine.harness import git

from .conftest import start_server

pytestmark = [pytest.mark.slow, pytest.mark.network]

ERRAND_TOML = """\
[setup]
commands = ["python3 -m venv .venv", ".venv/bin/pip install --quiet -r requirements-test.txt"]
network = { registries = ["pip"] }

[test]
command = ".venv/bin/python -m pytest"
"""

TOX_INI = "[pytest]\naddopts = --color=yes -p no:cacheprovider\ntestpaths = tests\npythonpath = src\n"

LEDGER = """\
def balance(entries):
    return sum(amount for amount in entries if amount > 0)


def total(entries):
    return round(sum(entries))
"""

FIXED = """\
def balance(entries):
    if not entries:
        return None
    return sum(entries)


def total(entries):
    return round(sum(entries), 2)
"""

TESTS = """\
from ledger import balance, total


def test_refunds_count_against_the_balance():
    assert balance([10, -4]) == 6


def test_totals_keep_cents():
    assert total([0.1, 0.2]) == 0.3


def test_an_empty_ledger_balances_to_zero():
    assert balance([]) == 0


def test_deposits_add_up():
    assert balance([1, 2]) == 3


def test_total_of_whole_amounts():
    assert total([1, 2]) == 3
"""

FILES = {
    "errand.toml": ERRAND_TOML,
    "requirements-test.txt": "pytest==8.4.2\n",
    "tox.ini": TOX_INI,
    ".gitignore": ".venv/\n__pycache__/\n",
    "README.md": "# ledger\n\nBalances and totals.\n",
    "src/ledger.py": LEDGER,
    "tests/test_ledger.py": TESTS,
}


def _committed(root: Path, files: dict[str, str]) -> Path:
    """A repository at ``root`` holding ``files``, committed on ``main``."""
    root.mkdir(parents=True)
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.name", "Test User")
    git(root, "config", "user.email", "user@example.com")
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", root.name)
    return root


def _write(path: str, text: str) -> tuple[str, dict[str, str]]:
    return ("shell", {"command": f"cat > {path} <<'ERRAND_EOF'\n{text}ERRAND_EOF"})


def _task(home: Path, repo: Path, title: str, model: str) -> str:
    ran = errand(home, "run", title, "--repo", str(repo), "--model", model, "-f")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    listed = json.loads(errand(home, "ls", "--json").stdout)
    [task] = [t for t in listed if t["title"] == title]
    return str(task["id"])


def _text(page: str) -> str:
    """A page's visible text, one space between words."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())


def _pages(tmp_path: Path, home: Path, *task_ids: str) -> list[str]:
    """The review page of each task, from ``errand serve`` over the home's store."""
    served = start_server(tmp_path, env={"ERRAND_DATABASE_URL": f"sqlite:///{home / 'errand.db'}"})
    try:
        with served.client() as client:
            pages = [client.get(f"/tasks/{task_id}/review") for task_id in task_ids]
    finally:
        served.stop()
    assert [page.status_code for page in pages] == [200] * len(task_ids)
    return [page.text for page in pages]


def test_show_and_the_review_page_name_the_tests_a_fix_flipped_each_way(tmp_path: Path) -> None:
    home = tmp_path / "home"
    repo = _committed(tmp_path / "ledger", FILES)
    flip = script(tmp_path / "flip.json", [
        [_write("src/ledger.py", FIXED)],
        [("finish", {"summary": "balance() counts refunds; totals keep cents", "assumptions": []})],
    ])
    try:
        task = _task(home, repo, "Make refunds count", flip)
        shown = errand(home, "show", task)
    finally:
        stop_worker(home)
    assert shown.returncode == 0, shown.stderr
    out = " ".join(shown.stdout.split())
    # Colour forced by the project's config still reads as counts, and the tests are named.
    assert "tests on base: fail (exit 1) — 3 passed, 2 failed" in out, out
    assert "tests after: fail (exit 1) — 4 passed, 1 failed" in out, out
    assert ("fixed (fail → pass): tests/test_ledger.py::test_refunds_count_against_the_balance, "
            "tests/test_ledger.py::test_totals_keep_cents") in out, out
    assert "broken (pass → fail): tests/test_ledger.py::test_an_empty_ledger_balances_to_zero" in out, out
    assert "failing: tests/test_ledger.py::test_an_empty_ledger_balances_to_zero" in out, out
    assert "\x1b" not in shown.stdout and "␛" not in shown.stdout

    [page] = [_text(raw) for raw in _pages(tmp_path, home, task)]
    assert ("Fixed: fail → pass (2) tests/test_ledger.py::test_refunds_count_against_the_balance "
            "tests/test_ledger.py::test_totals_keep_cents") in page, page
    assert "Broken: pass → fail (1) tests/test_ledger.py::test_an_empty_ledger_balances_to_zero" in page
    assert "assert None == 0" in page and "errand-report" not in page  # the tail, without errand's own report line
    assert "Tests after fail (exit 1) — 4 passed, 1 failed .venv/bin/python -m pytest Failing: " \
           "tests/test_ledger.py::test_an_empty_ledger_balances_to_zero" in page, page


def test_a_test_command_that_fails_before_any_test_shows_its_cause_and_is_a_failed_command(tmp_path: Path) -> None:
    home = tmp_path / "home"
    repo = _committed(tmp_path / "ledger", FILES)
    breaks = script(tmp_path / "breaks.json", [
        [_write("tox.ini", TOX_INI + "filterwarnings error\n")],  # "=" forgotten: pytest stops before any test
        [("shell", {"command": "true"})],
        [("finish", {"summary": "warnings are errors", "assumptions": []})],
    ])
    try:
        task = _task(home, repo, "Turn warnings into errors", breaks)
        shown = errand(home, "show", task)
    finally:
        stop_worker(home)
    out = " ".join(shown.stdout.split())
    assert "tests after: fail (exit 4) — no test reported" in out, out
    cause = "ERROR: /workspace/tox.ini:5: unexpected line: 'filterwarnings error'"
    assert f"│ {cause}" in shown.stdout, shown.stdout  # the tail, beside the verdict
    assert ("the test command (tests after) failed before reporting any test: " + cause) in out, out

    [raw] = _pages(tmp_path, home, task)
    page = _text(raw)
    # The verdict, and beside it the output's tail with the cause in it.
    assert "Tests after fail (exit 4) — no test reported .venv/bin/python -m pytest" in page, page
    tail = re.search(r'<pre class="tail" aria-label="Tests after: the last lines of its output">(.*?)</pre>',
                     raw, re.DOTALL)
    assert tail is not None and cause in html.unescape(tail.group(1)), raw
    # One story: the failed test command is a failed command, with its cause.
    assert ("Failed commands .venv/bin/python -m pytest exit 4 — the test command (tests after) failed "
            f"before reporting any test: {cause}") in page, page
    assert "None of the agent's 2 command(s) failed." in page
    assert "None of 2 command(s) failed" not in page

UNITS_TOML = '[test]\ncommand = "npm test"\n'
CONVERT = "function toCelsius(f) {\n  return (f - 32) * 5 / 8;\n}\n\nmodule.exports = { toCelsius };\n"
CONVERT_TESTS = """\
const test = require('node:test');
const assert = require('node:assert');
const { toCelsius } = require('../src/convert');

test('freezing is zero', () => { assert.strictEqual(toCelsius(32), 0); });
test('boiling is a hundred', () => { assert.strictEqual(toCelsius(212), 100); });
test.describe('body heat', () => {
  test.it('is thirty-seven', () => { assert.strictEqual(toCelsius(98.6), 37); });
});
"""


def _units(root: Path) -> Path:
    """An npm project whose tests run on node's own runner, which prints TAP when not on a terminal."""
    package = {"name": "units", "version": "1.0.0", "private": True, "scripts": {"test": "node --test"}}
    return _committed(root, {"package.json": json.dumps(package, indent=2) + "\n", "errand.toml": UNITS_TOML,
                             "src/convert.js": CONVERT, "test/convert.test.js": CONVERT_TESTS})


def test_tap_from_node_s_test_runner_reads_as_tap_with_its_tests_named(tmp_path: Path) -> None:
    home = tmp_path / "home"
    repo = _units(tmp_path / "units")
    fix = script(tmp_path / "fix.json", [
        [("edit_file", {"path": "src/convert.js", "old": "5 / 8", "new": "5 / 9"})],
        [("finish", {"summary": "the factor is 5/9", "assumptions": []})],
    ])
    try:
        task = _task(home, repo, "Fix Fahrenheit to Celsius", fix)
        shown = errand(home, "show", task)
    finally:
        stop_worker(home)
    out = " ".join(shown.stdout.split())
    # `ok 1 - freezing is zero` is TAP, not `go test`'s `ok  pkg`: counted, and the failures named.
    assert "tests on base: fail (exit 1) — 1 passed, 2 failed" in out, out
    assert "tests after: pass — 3 passed" in out, out
    assert "fixed (fail → pass): boiling is a hundred, body heat > is thirty-seven" in out, out
    evidence = json.loads(errand(home, "show", task, "--json").stdout)["runs"][0]["result"]["evidence"]
    assert evidence["tests_before"]["source"] == "tap"
    assert evidence["tests_before"]["failing"] == ["boiling is a hundred", "body heat > is thirty-seven"]


PRICING_TOML = """\
[setup]
commands = ["npm ci --no-audit --no-fund"]
network = { registries = ["npm"] }

[test]
command = "FORCE_COLOR=1 npm test"
"""
PRICE = "export function withTax(cents, rate) {\n  return cents + cents * rate;\n}\n"
PRICE_TESTS = """\
import { describe, it, expect } from 'vitest';
import { withTax } from '../src/price.js';

describe('withTax', () => {
  it('rounds to whole cents', () => { expect(withTax(999, 0.0825)).toBe(1081); });
  it('adds nothing at a zero rate', () => { expect(withTax(999, 0)).toBe(999); });
});
"""


def test_vitest_s_coloured_counts_and_the_test_a_fix_flipped(tmp_path: Path) -> None:
    home = tmp_path / "home"
    package = {"name": "pricing", "version": "2.1.0", "private": True, "type": "module",
               "scripts": {"test": "vitest run"}, "devDependencies": {"vitest": "^3.2.0"}}
    # The lockfile a person commits, made by npm itself from the registry it is configured with.
    locking = tmp_path / "locking"
    locking.mkdir()
    (locking / "package.json").write_text(json.dumps(package, indent=2) + "\n")
    subprocess.run(["npm", "install", "--package-lock-only", "--ignore-scripts", "--no-audit", "--no-fund"],
                   cwd=locking, check=True, capture_output=True, timeout=600)
    lock = (locking / "package-lock.json").read_text()
    repo = _committed(tmp_path / "pricing", {
        "package.json": json.dumps(package, indent=2) + "\n", "package-lock.json": lock, "errand.toml": PRICING_TOML,
        ".gitignore": "node_modules/\n", "src/price.js": PRICE, "test/price.test.js": PRICE_TESTS})
    fix = script(tmp_path / "fix.json", [
        [("edit_file", {"path": "src/price.js", "old": "return cents + cents * rate;",
                        "new": "return Math.round(cents + cents * rate);"})],
        [("finish", {"summary": "withTax rounds to whole cents", "assumptions": []})],
    ])
    try:
        task = _task(home, repo, "Round prices", fix)
        shown = errand(home, "show", task)
    finally:
        stop_worker(home)
    out = " ".join(shown.stdout.split())
    assert "tests on base: fail (exit 1) — 1 passed, 1 failed" in out, out
    assert "tests after: pass — 2 passed" in out, out
    assert "fixed (fail → pass): test/price.test.js > withTax > rounds to whole cents" in out, out
    evidence = json.loads(errand(home, "show", task, "--json").stdout)["runs"][0]["result"]["evidence"]
    assert evidence["tests_before"]["source"] == "vitest"
