"""Which forge: GitHub, Gitea (and Forgejo) or GitLab, chosen per repository.

A repository is on the forge whose ``forge.toml`` table lists it; an issue's URL is on
the forge whose web root it starts with. Each forge's client is imported only when
that forge is opened (githubkit is not loaded for a GitLab task, nor for ``--help``).
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlsplit

from errand.errors import ConfigError
from errand.forge.errors import ForgeError
from errand.forge.protocol import Forge
from errand.forge.refs import IssueRef
from errand.forge.settings import ForgeSettings

__all__ = ["KINDS", "kind_of", "open_forge", "parse_issue", "web_root"]

KINDS = ("github", "gitea", "gitlab")
_ALIASES = {"forgejo": "gitea", "ghe": "github"}
_API = {"github": "/api/v3", "gitea": "/api/v1", "gitlab": "/api/v4"}


def kind_of(name: str) -> str:
    """``github``, ``gitea`` (Forgejo's too) or ``gitlab``, from what a person typed."""
    kind = _ALIASES.get(name.lower(), name.lower())
    if kind not in KINDS:
        raise ConfigError(f"unknown forge {name!r}: errand speaks github, gitea (and forgejo) and gitlab",
                          code="invalid_input")
    return kind


def open_forge(kind: str, settings: ForgeSettings | None = None,
               environ: Mapping[str, str] | None = None) -> tuple[Forge, ForgeSettings, str]:
    """The ``kind`` forge ``forge.toml`` describes, its settings, and the token it uses."""
    settings = settings or ForgeSettings.load(environ=environ, kind=kind)
    token = settings.token(environ)
    if kind == "gitea":
        from errand.forge.hosts.gitea import GiteaForge

        return GiteaForge(token, base_url=settings.base_url), settings, token
    if kind == "gitlab":
        from errand.forge.hosts.gitlab import GitLabForge

        return GitLabForge(token, base_url=settings.base_url), settings, token
    from errand.forge.hosts.github import GitHubForge

    return GitHubForge(token, base_url=settings.base_url), settings, token


def api_root(kind: str, url: str) -> str:
    """The REST API's root for a server's address (``https://git.acme`` → ``…/api/v1``)."""
    url = url.rstrip("/")
    if kind == "github" and urlsplit(url).hostname in ("github.com", "api.github.com"):
        return "https://api.github.com"
    return url if url.endswith(_API[kind]) else url + _API[kind]


def web_root(kind: str, base_url: str) -> str:
    """Where the forge's pages are, from its API root: what an issue's URL starts with."""
    if base_url.rstrip("/") == "https://api.github.com":
        return "https://github.com"
    return base_url.rstrip("/").removesuffix(_API[kind])


def parse_issue(text: str, environ: Mapping[str, str] | None = None) -> tuple[str, IssueRef]:
    """The forge and the issue ``text`` names: a URL under a configured forge's web root, a
    reference to a repository one table lists, a GitLab-looking URL (``/-/issues/``), else GitHub."""
    given = text.strip()
    tables = {kind: ForgeSettings.load(environ=environ, kind=kind) for kind in KINDS}
    if "://" in given:
        for kind, settings in tables.items():
            root = web_root(kind, settings.base_url) if settings.base_url else ""
            if root and given.startswith(root + "/"):
                return kind, IssueRef.parse_path(text, given[len(root):])
        ref = IssueRef.parse(given)
        return ("gitlab" if "/-/" in urlsplit(given).path else _listing(tables, ref.repo)), ref
    ref = IssueRef.parse(given)
    return _listing(tables, ref.repo), ref


def _listing(tables: Mapping[str, ForgeSettings], repo: str) -> str:
    listed = [kind for kind, settings in tables.items() if repo in settings.repos]
    if len(listed) > 1:
        raise ForgeError(f"{repo} is set up on {' and '.join(listed)}: name the issue by its URL",
                         code="bad_issue_ref")
    return listed[0] if listed else "github"
