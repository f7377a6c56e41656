"""``forge.toml``: each forge's defaults, the ``ERRAND_*`` overrides, and a file that says a secret,
an unknown key or a bad value is refused with the file and the key named."""

from __future__ import annotations

from pathlib import Path

import pytest

from errand.errors import ConfigError
from errand.forge import ForgeError, ForgeSettings


def written(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "forge.toml"
    path.write_text(text)
    return path


def test_no_file_is_each_forges_defaults(tmp_path: Path) -> None:
    missing = tmp_path / "forge.toml"
    github = ForgeSettings.load(missing, {})
    assert (github.base_url, github.token_env, github.label, github.draft, github.repos) == (
        "https://api.github.com", "GITHUB_TOKEN", "errand", True, {})
    gitlab = ForgeSettings.load(missing, {}, kind="gitlab")
    assert (gitlab.base_url, gitlab.token_env, gitlab.webhook_secret_env, gitlab.display) == (
        "https://gitlab.com/api/v4", "GITLAB_TOKEN", "ERRAND_GITLAB_WEBHOOK_SECRET", "GitLab")
    assert ForgeSettings.load(missing, {}, kind="gitea").base_url == ""


def test_a_table_sets_a_forge_and_its_repositories(tmp_path: Path) -> None:
    path = written(tmp_path, '[gitea]\nbase_url = "https://git.acme/api/v1"\nlabel = "bot"\nci_fix_attempts = 2\n'
                             'pr = "draft-when-ready"\n[gitea.repos."acme/calc"]\npath = "~/calc"\nmodel = "gpt"\n')
    settings = ForgeSettings.load(path, {}, kind="gitea")
    assert (settings.kind, settings.base_url, settings.label, settings.ci_fix_attempts, settings.pr) == (
        "gitea", "https://git.acme/api/v1", "bot", 2, "draft-when-ready")
    repo = settings.repo("acme/calc")
    assert repo.path == Path("~/calc").expanduser() and repo.model == "gpt"
    assert ForgeSettings.load(path, {}).repos == {}  # the GitHub table is another one


def test_the_environment_overrides_the_url_and_holds_the_token_and_secret(tmp_path: Path) -> None:
    path = written(tmp_path, '[github]\nbase_url = "https://ghe.corp/api/v3"\ntoken_env = "CORP_TOKEN"\n')
    settings = ForgeSettings.load(path, {"ERRAND_GITHUB_URL": "http://127.0.0.1:9/api/v3"})
    assert settings.base_url == "http://127.0.0.1:9/api/v3"
    assert settings.token({"CORP_TOKEN": " t1 \n"}) == "t1"
    assert settings.token({"CORP_TOKEN": "t1", "ERRAND_GITHUB_TOKEN": "t2"}) == "t2"
    assert settings.webhook_secret({"ERRAND_WEBHOOK_SECRET": "  "}) is None
    assert settings.webhook_secret({"ERRAND_WEBHOOK_SECRET": "s"}) == "s"


def test_no_token_says_which_variables_to_set(tmp_path: Path) -> None:
    settings = ForgeSettings.load(tmp_path / "none.toml", {}, kind="gitlab")
    with pytest.raises(ForgeError) as caught:
        settings.token({"GITLAB_TOKEN": "   "})
    assert caught.value.code == "forge_not_configured"
    assert "ERRAND_GITLAB_TOKEN" in str(caught.value) and "GITLAB_TOKEN" in str(caught.value)


def test_a_repository_not_set_up_says_how_to_set_it_up(tmp_path: Path) -> None:
    with pytest.raises(ForgeError) as caught:
        ForgeSettings.load(tmp_path / "none.toml", {}).repo("acme/calc")
    assert caught.value.code == "forge_not_configured" and "errand forge connect github" in str(caught.value)


@pytest.mark.parametrize(("text", "code", "named"), [
    ('[github]\ntoken = "ghp_x"\n', "unknown_key", "'token'"),
    ('[github]\nwebhook_secret = "s"\n', "unknown_key", "'webhook_secret'"),
    ('[github]\nlabels = "x"\n', "unknown_key", "'labels'"),
    ('[github]\ntoken_env = "not a name"\n', "invalid_config", "token_env"),
    ('[github]\nci_fix_attempts = 6\n', "invalid_config", "ci_fix_attempts"),
    ('[github]\nci_fix_attempts = true\n', "invalid_config", "ci_fix_attempts"),
    ('[github]\npr = "always"\n', "invalid_config", "[github] pr must be"),
    ('[github]\nrepos = "acme/calc"\n', "invalid_config", "[github.repos]"),
    ('[github.repos."acme/calc"]\nmodel = "gpt"\n', "invalid_config", '"acme/calc"'),
    ('[github.repos."acme/calc"]\npath = "/x"\nbranch = "main"\n', "invalid_config", '"acme/calc"'),
    ('github = "x"\n', "invalid_config", "[github] must be a table"),
    ('[github\n', "invalid_toml", "forge.toml"),
])
def test_a_bad_file_is_refused_naming_the_file_and_the_key(tmp_path: Path, text: str, code: str, named: str) -> None:
    path = written(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        ForgeSettings.load(path, {})
    assert caught.value.code == code
    assert str(path) in str(caught.value) and named in str(caught.value)


@pytest.mark.parametrize("kind", ["gitlab", "gitea"])
def test_a_bad_setting_of_another_forge_names_its_table(tmp_path: Path, kind: str) -> None:
    path = written(tmp_path, f'[{kind}]\npr = "always"\n')
    with pytest.raises(ConfigError, match=rf"\[{kind}\] pr must be"):
        ForgeSettings.load(path, {}, kind=kind)
