"""``errand forge`` in process, where nothing reaches a forge: a forge errand does not speak, a task
with no pull request, a base URL the settings file already sets otherwise, and a token missing —
each one error line with its exit code, and the settings file left as it was."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from errand.cli import app


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("ERRAND_HOME", str(home))
    monkeypatch.delenv("ERRAND_DATABASE_URL", raising=False)
    for variable in ("GITHUB_TOKEN", "ERRAND_GITHUB_TOKEN", "GITEA_TOKEN", "ERRAND_GITEA_TOKEN"):
        monkeypatch.delenv(variable, raising=False)
    return home


def refused(result: Result, code: int) -> str:
    assert result.exit_code == code, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in result.output, result.stderr
    return lines[0]


def test_a_forge_errand_does_not_speak_is_refused(home: Path) -> None:
    said = refused(CliRunner().invoke(app, ["forge", "connect", "bitbucket", "--repo", "acme/widgets"]), 2)
    assert "unknown forge 'bitbucket'" in said and "gitea (and forgejo)" in said
    assert not (home / "forge.toml").exists()


def test_the_status_of_a_task_with_no_pull_request_says_how_to_open_one(home: Path) -> None:
    said = refused(CliRunner().invoke(app, ["forge", "status", "t-0123456789"]), 2)
    assert said == "error: task t-0123456789 has no pull request (`errand forge pr t-0123456789` opens it)"


def test_a_base_url_the_settings_file_sets_otherwise_is_refused_and_the_file_kept(home: Path) -> None:
    settings = '[gitea]\nbase_url = "https://git.acme.test/api/v1"\n'
    (home / "forge.toml").write_text(settings)
    said = refused(CliRunner().invoke(app, ["forge", "connect", "gitea", "--repo", "acme/widgets",
                                            "--base-url", "https://code.other.test"]), 2)
    assert "https://code.other.test/api/v1" in said and "edit it there" in said
    assert (home / "forge.toml").read_text() == settings


def test_connecting_without_a_token_says_which_variable_to_set(home: Path) -> None:
    said = refused(CliRunner().invoke(app, ["forge", "connect", "github", "--repo", "acme/widgets"]), 1)
    assert "no GitHub token: set ERRAND_GITHUB_TOKEN or GITHUB_TOKEN" in said
    assert not (home / "forge.toml").exists()


def test_a_base_url_whose_token_check_fails_is_not_written(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A first connect with a mistyped address or no token: nothing is kept, so the next try, with the
    right address, is not refused for the wrong one in the file."""
    said = refused(CliRunner().invoke(app, ["forge", "connect", "gitea", "--repo", "acme/widgets",
                                            "--base-url", "https://git.acme.test"]), 1)
    assert "no Gitea token" in said
    monkeypatch.setenv("GITEA_TOKEN", "gitea-token-of-a-test")
    said = refused(CliRunner().invoke(app, ["forge", "connect", "gitea", "--repo", "acme/widgets",
                                            "--base-url", "http://127.0.0.1:9"]), 1)
    assert "could not be reached" in said
    assert not (home / "forge.toml").exists()
