"""``errand config``: errand.toml's JSON Schema for editors, and a check of a repository's file that
names the first thing wrong."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from errand.cli.config import config_app
from errand.tasks.round.errand_toml import schema_text

runner = CliRunner()


def test_schema_prints_the_json_schema_editors_read() -> None:
    printed = runner.invoke(config_app, ["schema"])
    assert printed.exit_code == 0 and printed.stdout == schema_text()
    schema = json.loads(printed.stdout)
    assert schema["$schema"].startswith("http://json-schema.org/draft-04/") and "setup" in schema["properties"]


def test_a_repository_without_the_file_gets_the_defaults(tmp_path: Path) -> None:
    checked = runner.invoke(config_app, ["check", "--repo", str(tmp_path)])
    assert checked.exit_code == 0
    assert checked.stdout.strip() == f"no errand.toml in {tmp_path.resolve()}: a task gets the defaults"


def test_a_repository_without_the_file_is_told_what_errand_detects(tmp_path: Path) -> None:
    (tmp_path / "package.json").write_text(json.dumps({"name": "app", "scripts": {"test": "vitest run"}}))
    (tmp_path / "package-lock.json").write_text("{}")
    checked = runner.invoke(config_app, ["check", "--repo", str(tmp_path)])
    assert checked.exit_code == 0
    assert checked.stdout.startswith(f"no errand.toml in {tmp_path.resolve()}: a task uses what errand detects (")
    assert "errand init writes it down to edit" in checked.stdout


def test_a_good_file_is_ok_and_a_bad_one_names_its_first_fault_and_exits_2(tmp_path: Path) -> None:
    (tmp_path / "errand.toml").write_text("[setup]\ncommands = ['make']\n")
    fine = runner.invoke(config_app, ["check", "--repo", str(tmp_path)])
    assert fine.exit_code == 0 and fine.stdout.strip() == f"{tmp_path.resolve() / 'errand.toml'}: ok"
    (tmp_path / "errand.toml").write_text("[setup]\ncomand = ['make']\n")
    bad = runner.invoke(config_app, ["check", "--repo", str(tmp_path)])
    assert bad.exit_code == 2 and bad.stdout == ""
    assert "errand.toml: unknown key [setup] comand (did you mean commands?)" in bad.stderr.replace("\n", "")


def test_a_file_that_is_not_toml_or_leads_out_of_the_repository_is_refused(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "errand.toml").write_text("[setup\n")
    assert runner.invoke(config_app, ["check", "--repo", str(repo)]).exit_code == 2
    (repo / "errand.toml").unlink()
    (tmp_path / "elsewhere.toml").write_text("[setup]\ncommands = ['make']\n")
    (repo / "errand.toml").symlink_to(tmp_path / "elsewhere.toml")
    outside = runner.invoke(config_app, ["check", "--repo", str(repo)])
    assert outside.exit_code == 2 and "is not a regular file inside the repository" in outside.stderr.replace("\n", "")


def test_the_repository_may_be_named_as_an_argument_as_well_as_with_repo(tmp_path: Path) -> None:
    (tmp_path / "errand.toml").write_text("[setup]\ncommands = ['make']\n")
    as_argument = runner.invoke(config_app, ["check", str(tmp_path)])
    assert as_argument.exit_code == 0 and as_argument.stdout.strip() == f"{tmp_path.resolve() / 'errand.toml'}: ok"
    both_the_same = runner.invoke(config_app, ["check", str(tmp_path), "--repo", f"{tmp_path}/."])
    assert both_the_same.exit_code == 0 and both_the_same.stdout == as_argument.stdout


def test_an_argument_and_a_repo_that_differ_are_refused_before_anything_is_read(tmp_path: Path) -> None:
    (tmp_path / "errand.toml").write_text("[setup\n")
    other = tmp_path / "other"
    other.mkdir()
    refused = runner.invoke(config_app, ["check", str(tmp_path), "--repo", str(other)])
    assert refused.exit_code == 2 and refused.stdout == ""
    said = " ".join(refused.stderr.split())
    assert f"PATH is {tmp_path} but --repo is {other}: name the repository once" in said
    assert "errand.toml" not in said
