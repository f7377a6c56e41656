"""Which forge: the kind a person names, the API and web roots of a server, and the forge an
issue is on (a URL under a configured forge, a repository a table lists, else GitHub)."""

from __future__ import annotations

from pathlib import Path

import pytest

from errand.errors import ConfigError
from errand.forge import ForgeError, IssueRef
from errand.forge.hosts.kinds import api_root, kind_of, open_forge, parse_issue, web_root
from errand.forge.settings import ForgeSettings

from .conftest import GITLAB_REPO, REPO, OnForge


def test_gitlab_urls_name_gitlab(gitlab: OnForge) -> None:
    assert parse_issue(f"{gitlab.fake.url}/{GITLAB_REPO}/-/issues/3") == ("gitlab", IssueRef("acme/tools", "calc", 3))
    assert parse_issue(f"{gitlab.fake.url}/{GITLAB_REPO}/-/merge_requests/4") == (
        "gitlab", IssueRef("acme/tools", "calc", 4, pull=True))
    assert parse_issue(f"{GITLAB_REPO}#5") == ("gitlab", IssueRef("acme/tools", "calc", 5))
    assert parse_issue("https://gitlab.example/a/b/-/issues/6")[0] == "gitlab"  # not configured, yet plainly GitLab


def test_an_issue_url_under_the_gitea_server_names_gitea(gitea: OnForge) -> None:
    kind, ref = parse_issue(f"{gitea.fake.url}/{REPO}/issues/3")
    assert (kind, ref) == ("gitea", IssueRef("acme", "calc", 3))
    assert parse_issue(f"{REPO}#4") == ("gitea", IssueRef("acme", "calc", 4))  # forge.toml lists the repository
    assert parse_issue("other/thing#5")[0] == "github"


@pytest.mark.parametrize(("typed", "kind"), [("github", "github"), ("GitHub", "github"), ("ghe", "github"),
                                             ("forgejo", "gitea"), ("Gitea", "gitea"), ("gitlab", "gitlab")])
def test_a_forge_is_named_as_a_person_types_it(typed: str, kind: str) -> None:
    assert kind_of(typed) == kind


def test_an_unknown_forge_is_a_clear_error_that_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError) as caught:
        kind_of("bitbucket")
    assert caught.value.code == "invalid_input"
    assert "'bitbucket'" in str(caught.value) and "gitlab" in str(caught.value)


@pytest.mark.parametrize(("kind", "url", "root"), [
    ("github", "https://github.com", "https://api.github.com"),
    ("github", "https://api.github.com/", "https://api.github.com"),
    ("github", "https://ghe.corp", "https://ghe.corp/api/v3"),
    ("gitea", "https://git.acme/", "https://git.acme/api/v1"),
    ("gitea", "https://git.acme/api/v1", "https://git.acme/api/v1"),
    ("gitlab", "https://gl.acme", "https://gl.acme/api/v4"),
])
def test_a_servers_address_gives_its_api_root(kind: str, url: str, root: str) -> None:
    assert api_root(kind, url) == root


@pytest.mark.parametrize(("kind", "base_url", "root"), [
    ("github", "https://api.github.com", "https://github.com"),
    ("github", "https://ghe.corp/api/v3/", "https://ghe.corp"),
    ("gitea", "https://git.acme/api/v1", "https://git.acme"),
    ("gitlab", "https://gl.acme/sub/api/v4", "https://gl.acme/sub"),
])
def test_the_web_root_is_the_api_root_without_its_api(kind: str, base_url: str, root: str) -> None:
    assert web_root(kind, base_url) == root


def test_a_repository_two_forges_list_must_be_named_by_its_url(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ERRAND_HOME", str(tmp_path))
    (tmp_path / "forge.toml").write_text('[github.repos."acme/calc"]\npath = "/srv/calc"\n\n'
                                         '[gitea]\nbase_url = "https://git.acme/api/v1"\n'
                                         '[gitea.repos."acme/calc"]\npath = "/srv/calc2"\n')
    environ: dict[str, str] = {}
    with pytest.raises(ForgeError) as caught:
        parse_issue("acme/calc#3", environ)
    assert caught.value.code == "bad_issue_ref" and "github and gitea" in str(caught.value)
    assert parse_issue("https://git.acme/acme/calc/issues/3", environ) == ("gitea", IssueRef("acme", "calc", 3))
    assert parse_issue("https://github.com/acme/calc/issues/3", environ) == ("github", IssueRef("acme", "calc", 3))


def test_a_forge_opens_with_its_tables_server_and_the_token_from_the_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ERRAND_HOME", str(tmp_path))
    (tmp_path / "forge.toml").write_text('[gitlab]\nbase_url = "https://gl.acme/api/v4"\n')
    forge, settings, token = open_forge("gitlab", environ={"GITLAB_TOKEN": " glpat-x "})
    assert (forge.name, forge.base_url, settings.kind, token) == ("gitlab", "https://gl.acme/api/v4", "gitlab",
                                                                   "glpat-x")
    with pytest.raises(ForgeError) as caught:
        open_forge("gitea", ForgeSettings(base_url="https://git.acme/api/v1", kind="gitea"), environ={})
    assert caught.value.code == "forge_not_configured"
