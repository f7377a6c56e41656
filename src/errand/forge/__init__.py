"""errand on the forge: issues in, pull requests out, review comments back in.

The :class:`Forge` protocol is what errand needs of a forge; :class:`GitHubForge`
implements it for GitHub and GitHub Enterprise, :class:`~errand.forge.hosts.gitea.GiteaForge`
for Gitea and Forgejo, :class:`~errand.forge.hosts.gitlab.GitLabForge` for GitLab;
:func:`open_forge` opens the one a repository is on. :func:`open_github` builds one from
``forge.toml`` and the environment (the token never leaves this process: it is not
given to sandboxes, written to a log or an event, or stored in git's config).
githubkit is imported only when a forge is opened: ``errand --help`` must not pay for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from errand.forge.errors import ForgeError
from errand.forge.hosts.kinds import KINDS, open_forge
from errand.forge.protocol import Forge
from errand.forge.refs import IssueRef, looks_like_issue_ref
from errand.forge.settings import ForgeSettings

if TYPE_CHECKING:
    from errand.forge.hosts.github import GitHubForge

__all__ = ["KINDS", "Forge", "ForgeError", "ForgeSettings", "GitHubForge", "IssueRef", "looks_like_issue_ref",
           "open_forge", "open_github"]


def __getattr__(name: str) -> Any:
    if name == "GitHubForge":
        from errand.forge.hosts.github import GitHubForge

        return GitHubForge
    raise AttributeError(name)


def open_github(settings: ForgeSettings | None = None,
                environ: Mapping[str, str] | None = None) -> tuple[GitHubForge, ForgeSettings, str]:
    """The GitHub forge ``forge.toml`` describes, its settings, and the token it uses."""
    from errand.forge.hosts.github import GitHubForge

    settings = settings or ForgeSettings.load(environ=environ)
    token = settings.token(environ)
    return GitHubForge(token, base_url=settings.base_url), settings, token
