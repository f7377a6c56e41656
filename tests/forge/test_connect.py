"""``errand forge connect github``: what the token can do, what is missing, the webhook to add."""

from __future__ import annotations

import shutil
import threading
import tomllib
from pathlib import Path

import pytest

from engine.cli import errand
from errand.cli.forge import _write_settings
from errand.errors import ConfigError

from .conftest import REPO, SECRET, TOKEN, Forged


def test_connect_checks_access_writes_the_clone_and_prints_the_webhook(forged: Forged) -> None:
    (forged.home / "forge.toml").write_text(f'[github]\nbase_url = "{forged.fake.api_url}"\n')
    env = {**forged.env, "ERRAND_WEBHOOK_SECRET": ""}
    ran = errand(forged.home, "forge", "connect", "github", "--repo", REPO, "--path", str(forged.project),
                 "--url", "https://errand.acme.test", env=env)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "token of @errand-bot" in ran.stdout and "missing" not in ran.stdout
    assert "https://errand.acme.test/api/forge/github/webhook" in ran.stdout
    assert "secret: " in ran.stdout and "export ERRAND_WEBHOOK_SECRET=" in ran.stdout
    written = (forged.home / "forge.toml").read_text()
    assert f'[github.repos."{REPO}"]' in written and str(forged.project) in written
    assert TOKEN not in written and TOKEN not in ran.stdout


def test_connect_says_what_the_token_lacks(forged: Forged) -> None:
    forged.fake.scopes = "read:org"
    ran = errand(forged.home, "forge", "connect", "github", "--repo", REPO, env=forged.env)
    assert ran.returncode == 1
    assert "missing: the `repo` scope" in ran.stdout
    assert SECRET not in ran.stdout  # a secret already set is not printed


def test_no_token_is_a_clear_error(forged: Forged) -> None:
    env = {**forged.env, "GITHUB_TOKEN": ""}
    ran = errand(forged.home, "forge", "connect", "github", "--repo", REPO, env=env)
    assert ran.returncode == 1 and "no GitHub token: set ERRAND_GITHUB_TOKEN or GITHUB_TOKEN" in ran.stderr


def test_a_secret_in_forge_toml_is_refused(forged: Forged) -> None:
    (forged.home / "forge.toml").write_text('[github]\ntoken = "ghp_inline"\n')
    ran = errand(forged.home, "forge", "connect", "github", "--repo", REPO, env=forged.env)
    assert ran.returncode == 2 and "names the variable that holds it" in ran.stderr


def test_a_clone_whose_path_has_quotes_and_backslashes_is_written_so_it_reads_back(forged: Forged) -> None:
    """The values were written between quotes as they were: forge.toml no longer parsed, and every
    forge command after failed (a red team's find)."""
    odd = forged.home.parent / 'we"ird\\clone'
    shutil.copytree(forged.project, odd, symlinks=True)
    (forged.home / "forge.toml").write_text(f'[github]\nbase_url = "{forged.fake.api_url}"\n')
    ran = errand(forged.home, "forge", "connect", "github", "--repo", REPO, "--path", str(odd), env=forged.env)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert tomllib.loads((forged.home / "forge.toml").read_text())["github"]["repos"][REPO]["path"] == str(odd)
    again = errand(forged.home, "forge", "connect", "github", "--repo", REPO, env=forged.env)
    assert again.returncode == 0 and "missing: a local clone" not in again.stdout, again.stdout + again.stderr


def test_a_path_that_is_not_a_clone_writes_nothing(forged: Forged, tmp_path: Path) -> None:
    (tmp_path / "plain").mkdir()
    settings = forged.home / "forge.toml"
    settings.unlink()  # no address yet: the one given would be written
    ran = errand(forged.home, "forge", "connect", "github", "--repo", REPO, "--path", str(tmp_path / "plain"),
                 "--base-url", forged.fake.url, env=forged.env)
    assert ran.returncode == 2 and "is not a git clone" in ran.stderr
    assert not settings.exists()


def test_two_connects_writing_at_once_add_the_table_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each checked its address against the file before its network check and wrote after it: both
    added [gitea], and every forge command then refused the file (a red team's find)."""
    monkeypatch.setenv("ERRAND_HOME", str(tmp_path))
    outcomes: list[str] = []

    def connect(base_url: str) -> None:
        try:
            _write_settings("gitea", base_url=base_url, repo=None)
            outcomes.append("written")
        except ConfigError as refused:
            outcomes.append(refused.message)

    writers = [threading.Thread(target=connect, args=(f"https://git{n}.acme.test/api/v1",)) for n in range(8)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join()
    assert outcomes.count("written") == 1, outcomes
    assert all("written meanwhile" in outcome for outcome in outcomes if outcome != "written")
    assert set(tomllib.loads((tmp_path / "forge.toml").read_text())) == {"gitea"}
