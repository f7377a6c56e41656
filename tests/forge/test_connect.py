"""``errand forge connect github``: what the token can do, what is missing, the webhook to add."""

from __future__ import annotations

from engine.cli import errand

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
