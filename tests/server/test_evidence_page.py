"""Evidence that says why, on the faces a person reads it on (``errand show`` and the review
page): a pytest project whose config forces colour, where a change flips tests by name both
ways, and a change that breaks the test command before any test runs."""

from __future__ import annotations

import html
import json
import re
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


def test_show_and_the_review_page_name_the_flipped_tests_and_the_cause_of_a_broken_test_command(
        tmp_path: Path) -> None:
    home = tmp_path / "home"
    repo = _committed(tmp_path / "ledger", FILES)
    flip = script(tmp_path / "flip.json", [
        [_write("src/ledger.py", FIXED)],
        [("finish", {"summary": "balance() counts refunds; totals keep cents", "assumptions": []})],
    ])
    broken_ini = TOX_INI + "filterwarnings error\n"  # "=" forgotten: pytest stops before any test
    breaks = script(tmp_path / "breaks.json", [
        [_write("tox.ini", broken_ini)],
        [("shell", {"command": "true"})],
        [("finish", {"summary": "warnings are errors", "assumptions": []})],
    ])
    try:
        flipped = _task(home, repo, "Make refunds count", flip)
        configured = _task(home, repo, "Turn warnings into errors", breaks)

        shown = errand(home, "show", flipped)
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

        shown = errand(home, "show", configured)
        out = " ".join(shown.stdout.split())
        assert "tests after: fail (exit 4) — no test reported" in out, out
        cause = "ERROR: /workspace/tox.ini:5: unexpected line: 'filterwarnings error'"
        assert f"│ {cause}" in shown.stdout, shown.stdout  # the tail, beside the verdict
        assert ("the test command (tests after) failed before reporting any test: " + cause) in out, out
    finally:
        stop_worker(home)

    served = start_server(tmp_path, env={"ERRAND_DATABASE_URL": f"sqlite:///{home / 'errand.db'}"})
    try:
        with served.client() as client:
            page = _text(client.get(f"/tasks/{flipped}/review").text)
            assert ("Fixed: fail → pass (2) tests/test_ledger.py::test_refunds_count_against_the_balance "
                    "tests/test_ledger.py::test_totals_keep_cents") in page, page
            assert "Broken: pass → fail (1) tests/test_ledger.py::test_an_empty_ledger_balances_to_zero" in page
            assert "Tests after fail (exit 1) — 4 passed, 1 failed .venv/bin/python -m pytest Failing: " \
                   "tests/test_ledger.py::test_an_empty_ledger_balances_to_zero" in page, page

            raw = client.get(f"/tasks/{configured}/review").text
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
    finally:
        served.stop()


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
