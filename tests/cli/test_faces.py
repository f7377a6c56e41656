"""What a new user meets first on the command line: help, refusals, and what `errand run`
leaves out of a task."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from engine.cli import errand
from engine.harness import git
from engine.projects import python_project
from errand.cli import app

runner = CliRunner()


@pytest.mark.parametrize("command", [["run"], ["serve"], ["sandbox", "create"], ["memory", "ls"], ["worker"]])
def test_help_fits_80_columns_with_whole_option_names_and_no_types_after_flags(command: list[str]) -> None:
    shown = runner.invoke(app, [*command, "--help"], env={"COLUMNS": "80"}, terminal_width=80)
    assert shown.exit_code == 0, shown.output
    assert "<bool>" not in shown.output and "…" not in shown.output
    assert all(len(line) <= 80 for line in shown.output.splitlines())
    if command == ["serve"]:
        assert "--allow-scripted-models" in shown.output
    if command == ["run"]:
        assert "A [models.NAME] from $ERRAND_HOME/config.toml" in shown.output  # not eaten as markup
        assert "--repo PATH" in shown.output and "--json " in shown.output


@pytest.mark.parametrize(("arguments", "said"), [
    (["--allow", "*"], "--allow '*' would allow every domain; --open-network lets it reach any public address"),
    (["--allow-cidr", "0.0.0.0/0"], "or use --open-network for any public address"),
])
def test_over_broad_network_flags_name_the_flag_that_does_it(arguments: list[str], said: str) -> None:
    refused = runner.invoke(app, ["sandbox", "create", *arguments])
    assert refused.exit_code == 2 and said in refused.output and "Network.open()" not in refused.output


def test_ls_refuses_a_limit_of_nothing(errand_home: Path) -> None:
    refused = errand(errand_home, "ls", "--limit", "0")
    assert refused.returncode == 2 and "--limit" in refused.stderr


def test_run_says_which_uncommitted_files_the_task_leaves_out(errand_home: Path, tmp_path: Path) -> None:
    repo = python_project(tmp_path / "tally")
    (repo / "src/tally/core.py").write_text("def total(amounts):\n    return round(sum(amounts), 2)\n")
    (repo / "errand.toml").write_text((repo / "errand.toml").read_text() + "\n[lint]\ncommand = 'ruff check'\n")
    (repo / "NOTES.md").write_text("try rounding to cents\n")
    (repo / ".venv").mkdir()  # ignored by .gitignore: not worth a word
    (repo / ".venv/pyvenv.cfg").write_text("home = /usr/bin\n")
    script = tmp_path / "script.json"
    script.write_text("[]")
    ran = errand(errand_home, "run", "Round to cents", "--repo", str(repo), "--model", f"scripted:{script}",
                 "--no-worker", "--json")
    assert ran.returncode == 0, ran.stderr
    task = json.loads(ran.stdout)
    note = ran.stderr.replace("\n", " ")
    assert "note: 3 uncommitted file(s) left out (the committed errand.toml is the one it uses)" in note
    assert f"the task starts from commit {task['base_commit'][:12]}, not your working tree" in note
    assert "NOTES.md" in note and "src/tally/core.py" in note and ".venv" not in note

    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "round to cents")
    clean = errand(errand_home, "run", "Round to cents", "--repo", str(repo), "--model", f"scripted:{script}",
                   "--no-worker")
    assert clean.returncode == 0 and "uncommitted" not in clean.stderr
