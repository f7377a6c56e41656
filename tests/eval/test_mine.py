"""`errand eval mine` on a team's own repository (built here, with git): fix commits become
SWE-bench instances whose FAIL_TO_PASS and PASS_TO_PASS come from running the tests in real
sandboxes, commits that cannot be graded are skipped with the reason, and the dataset
written validates as it is."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from errand.cli import app
from errand.eval.junit import parse_junit
from errand.eval.mine import runnable_tests, split_fix, test_ids

PYPROJECT = ('[project]\nname = "ledger"\nversion = "0.3.0"\nrequires-python = ">=3.9"\n\n'
             '[tool.pytest.ini_options]\npythonpath = ["src"]\n')
ERRAND_TOML = ('[setup]\ncommands = ["python3 -m venv .venv", ".venv/bin/pip install --quiet pytest==8.4.2"]\n'
               'network = {registries = ["pip"]}\nkey = ["pyproject.toml"]\n\n'
               '[test]\ncommand = ".venv/bin/python -m pytest -p no:cacheprovider -q"\n')
MONEY = '''"""Amounts of money in cents."""


def cents(amount):
    """2.5 -> 250."""
    return int(amount * 100)


def split(total, parts):
    """total cents shared out in parts that add up to it."""
    return [total // parts] * parts
'''
TESTS = '''from ledger.money import cents, split


def test_cents_of_whole_amounts():
    assert cents(2) == 200


def test_split_evenly():
    assert split(10, 2) == [5, 5]
'''


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def commit(repo: Path, message: str, files: dict[str, str]) -> str:
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture
def ledger(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A small project with a history: two real fixes, a docs change, a refactor whose new test passed before."""
    repo = tmp_path / "ledger"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "dev@example.com")
    git(repo, "config", "user.name", "Dev")
    shas = {"start": commit(repo, "ledger 0.3.0", {
        "pyproject.toml": PYPROJECT, "errand.toml": ERRAND_TOML, ".gitignore": ".venv/\n__pycache__/\n",
        "README.md": "# ledger\n", "src/ledger/__init__.py": "", "src/ledger/money.py": MONEY,
        "tests/test_money.py": TESTS})}
    shas["cents"] = commit(repo, "cents() rounds: cents(0.29) was 28\n\nThe float product is 28.999…", {
        "src/ledger/money.py": MONEY.replace("int(amount * 100)", "round(amount * 100)"),
        "tests/test_money.py": TESTS + "\n\ndef test_cents_rounds():\n    assert cents(0.29) == 29\n"})
    shas["docs"] = commit(repo, "README: usage", {"README.md": "# ledger\n\nMoney in cents.\n"})
    moved = MONEY.replace("int(amount * 100)", "round(amount * 100)").replace("2.5 -> 250.", "2.5 -> 250, rounded.")
    shas["refactor"] = commit(repo, "Say that cents() rounds", {
        "src/ledger/money.py": moved,
        "tests/test_money.py": TESTS + "\n\ndef test_cents_rounds():\n    assert cents(0.29) == 29\n"
                               "\n\ndef test_cents_of_half():\n    assert cents(0.5) == 50\n"})
    shas["split"] = commit(repo, "split() loses the remainder: split(10, 3) adds up to 9", {
        "src/ledger/money.py": moved.replace("    return [total // parts] * parts",
                                             "    share, left = divmod(total, parts)\n"
                                             "    return [share + 1] * left + [share] * (parts - left)"),
        "tests/test_split.py": "from ledger.money import split\n\n\nclass TestSplit:\n"
                               "    def test_remainder_goes_first(self):\n        assert split(10, 3) == [4, 3, 3]\n"})
    return repo, shas


@pytest.mark.slow
def test_mine_makes_instances_of_fix_commits_and_they_validate(ledger: tuple[Path, dict[str, str]],
                                                               tmp_path: Path) -> None:
    repo, shas = ledger
    out = tmp_path / "mined.jsonl"
    statements = tmp_path / "statements.json"
    statements.write_text(json.dumps({shas["split"][:10]: "Sharing 10 cents three ways gives 9 cents."}))
    result = CliRunner().invoke(app, ["eval", "mine", str(repo), f"{shas['start']}..main", "--out", str(out),
                                      "--name", "team/ledger", "--statements", str(statements)])
    assert result.exit_code == 0, result.output
    assert "adds or changes no test module" in result.output  # the docs commit
    assert "no test fails without the fix and passes with it" in result.output  # the refactor
    assert "wrote 2 instance(s)" in result.output

    records = [json.loads(line) for line in out.read_text().splitlines()]
    cents, split = records
    assert cents["instance_id"] == f"team__ledger-{shas['cents'][:12]}" and cents["repo"] == "team/ledger"
    assert cents["base_commit"] == shas["start"]
    assert cents["problem_statement"] == "cents() rounds: cents(0.29) was 28\n\nThe float product is 28.999…"
    assert json.loads(cents["FAIL_TO_PASS"]) == ["tests/test_money.py::test_cents_rounds"]
    assert json.loads(cents["PASS_TO_PASS"]) == ["tests/test_money.py::test_cents_of_whole_amounts",
                                                 "tests/test_money.py::test_split_evenly"]
    assert "diff --git a/src/ledger/money.py" in cents["patch"] and "tests/" not in cents["patch"]
    assert "diff --git a/tests/test_money.py" in cents["test_patch"] and "src/" not in cents["test_patch"]
    assert split["problem_statement"] == "Sharing 10 cents three ways gives 9 cents."
    assert json.loads(split["FAIL_TO_PASS"]) == ["tests/test_split.py::TestSplit::test_remainder_goes_first"]
    assert split["errand"]["test"] == ".venv/bin/python -m pytest -p no:cacheprovider -q"  # from errand.toml

    checked = CliRunner().invoke(app, ["eval", "validate", str(out), "--repeat", "1", "--json",
                                       "--run-dir", str(tmp_path / "validate")])
    assert checked.exit_code == 0, checked.output
    summary = json.loads(checked.stdout)
    assert (summary["gold_resolved"], summary["empty_resolved"], summary["ok"]) == (2, 0, True)


def test_mine_refuses_a_directory_that_is_no_repository(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["eval", "mine", str(tmp_path), "HEAD", "--out", str(tmp_path / "x.jsonl")])
    assert result.exit_code == 2
    assert "is not a git repository" in result.output
    assert not (tmp_path / "x.jsonl").exists()


DIFF = """diff --git a/src/ledger/money.py b/src/ledger/money.py
--- a/src/ledger/money.py
+++ b/src/ledger/money.py
@@ -1 +1 @@
-a
+b
diff --git a/tests/conftest.py b/tests/conftest.py
new file mode 100644
--- /dev/null
+++ b/tests/conftest.py
@@ -0,0 +1 @@
+x = 1
diff --git a/tests/test_old.py b/tests/test_old.py
deleted file mode 100644
--- a/tests/test_old.py
+++ /dev/null
@@ -1 +0,0 @@
-x = 1
diff --git a/tests/test_new.py b/tests/test_new.py
--- a/tests/test_new.py
+++ b/tests/test_new.py
@@ -1 +1 @@
-a
+b
"""


def test_a_fix_splits_by_test_paths_and_runs_the_test_modules_it_leaves() -> None:
    code, tests = split_fix(DIFF)
    assert code.count("diff --git") == 1 and "src/ledger/money.py" in code
    assert tests.count("diff --git") == 3 and "src/" not in tests
    assert runnable_tests(tests) == ("tests/test_new.py",)


def test_report_cases_are_named_as_swe_bench_names_them() -> None:
    report = b"""<testsuites><testsuite>
      <testcase classname="tests.test_split.TestSplit" name="test_remainder"/>
      <testcase classname="tests.test_money" name="test_cents[0.29]"><failure/></testcase>
      <testcase classname="tests.test_money_more" name="test_other"/>
      <testcase classname="elsewhere" name="test_x"/>
    </testsuite></testsuites>"""
    named = test_ids(parse_junit(report), ["tests/test_split.py", "tests/test_money.py", "tests/test_money_more.py"])
    assert named == {"tests/test_split.py::TestSplit::test_remainder": "passed",
                     "tests/test_money.py::test_cents[0.29]": "failed",
                     "tests/test_money_more.py::test_other": "passed"}
