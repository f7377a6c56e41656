"""The ``Forge`` protocol: what errand needs from GitHub, Gitea or GitLab, and nothing more."""

from __future__ import annotations

from typing import Protocol

from errand.forge.records import CheckState, Comment, Issue, PullRequest, Repository, ReviewComment, Scopes
from errand.forge.refs import IssueRef

__all__ = ["Forge"]


class Forge(Protocol):
    """One forge account on one server. Every method is one or a few HTTP requests; errors
    are :class:`~errand.forge.errors.ForgeError`. Implementations retry what is safe to retry
    (rate limits, a GET that met a network failure) and nothing else."""

    name: str  # "github"
    base_url: str  # the REST API's root (GitHub Enterprise: https://HOST/api/v3)

    def issue(self, ref: IssueRef) -> Issue:
        """The issue with its labels and its whole comment thread, in order."""
        ...

    def search_issues(self, repo: str, query: str, limit: int) -> list[Issue]:
        """Open or closed issues (not pull requests) of ``repo`` matching the forge's search
        ``query`` (GitHub: ``label:bug is:open``), without their threads, at most ``limit``."""
        ...

    def repository(self, repo: str) -> Repository:
        ...

    def access(self, repo: str) -> Scopes:
        ...

    def me(self) -> str:
        """The login of the account the token acts as: whatever it writes is errand's own."""
        ...

    def permission(self, repo: str, login: str) -> str:
        """``admin``, ``maintain``, ``write``, ``triage``, ``read`` or ``none``."""
        ...

    def comment(self, ref: IssueRef, body: str) -> Comment:
        ...

    def react(self, ref: IssueRef, content: str, *, comment_id: int | None = None, on_line: bool = False) -> None:
        """React to the issue (or to one of its comments) with ``content`` (``eyes``, ``rocket``…);
        ``on_line``: the comment is a line comment of a pull request's diff (GitHub keeps those apart)."""
        ...

    def find_pull(self, repo: str, branch: str) -> PullRequest | None:
        """The open pull request whose head is ``branch`` of ``repo`` itself, if any."""
        ...

    def open_pull(self, repo: str, *, branch: str, base: str, title: str, body: str, draft: bool) -> PullRequest:
        ...

    def pull(self, repo: str, number: int) -> PullRequest:
        ...

    def review_comments(self, repo: str, number: int) -> list[ReviewComment]:
        ...

    def review_body(self, repo: str, number: int, review_id: int) -> str:
        """The body of review ``review_id`` of pull request ``number`` ("" when it has none, or the
        forge keeps no reviews apart from their comments)."""
        ...

    def reply_review(self, repo: str, number: int, comment_id: int, body: str) -> None:
        ...

    def checks(self, repo: str, sha: str) -> list[CheckState]:
        """Check runs and commit statuses on ``sha``."""
        ...
