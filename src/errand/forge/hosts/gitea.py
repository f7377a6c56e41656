"""Gitea and Forgejo (one API: ``/api/v1``) through plain httpx.

Where Gitea differs from GitHub, and what errand does about it:

* a draft pull request is one whose title starts ``WIP:`` (Gitea's default prefix);
* an open pull request from the same branch already there is a 409, not a 422;
* a line comment has no reply endpoint: errand's reply is a review comment on the same
  file and line, which Gitea shows in that line's conversation;
* a collaborator's permission can read ``owner``: that is ``admin`` to errand;
* CI is commit statuses (Gitea Actions and external CI both write them).
"""

from __future__ import annotations

from typing import Any

import httpx

from errand.forge.errors import ForgeError
from errand.forge.hosts.query import IssueQuery
from errand.forge.hosts.rest import RestClient
from errand.forge.records import CheckState, Comment, Issue, PullRequest, Repository, ReviewComment, Scopes
from errand.forge.refs import IssueRef

__all__ = ["GiteaForge"]

PER_PAGE = 50  # Gitea's default cap (MAX_RESPONSE_ITEMS)
DRAFT = "WIP: "
_STATES = {"warning": "neutral"}  # Gitea's statuses: pending, success, error, failure, warning


class GiteaForge:
    """A :class:`~errand.forge.protocol.Forge` on a Gitea or Forgejo server's API at ``base_url``
    (``https://HOST/api/v1``)."""

    name = "gitea"

    def __init__(self, token: str, *, base_url: str, max_wait: float = 60.0,
                 transport: httpx.BaseTransport | None = None) -> None:
        if not token:
            raise ForgeError("no Gitea token: set GITEA_TOKEN (or the variable [gitea] token_env names)",
                             code="forge_not_configured")
        if not base_url:
            raise ForgeError("no Gitea server: set [gitea] base_url = \"https://HOST/api/v1\" in forge.toml "
                             "(`errand forge connect gitea --base-url https://HOST …`)", code="forge_not_configured")
        self.base_url = base_url.rstrip("/")
        self._rest = RestClient("Gitea", self.base_url, {"Authorization": f"token {token}"}, max_wait=max_wait,
                                hint="errand forge connect gitea --repo OWNER/NAME", transport=transport)

    def issue(self, ref: IssueRef) -> Issue:
        data = self._rest.json(f"reading {ref}", "GET", f"/repos/{ref.repo}/issues/{ref.number}")
        comments = tuple(_comment(c) for c in self._rest.pages(
            f"reading {ref}'s comments", f"/repos/{ref.repo}/issues/{ref.number}/comments", {"limit": PER_PAGE}))
        issue = _issue(data)
        return Issue(issue.number, issue.title, issue.body, issue.labels, issue.author, issue.url, comments,
                     issue.is_pull)

    def search_issues(self, repo: str, query: str, limit: int) -> list[Issue]:
        wanted = IssueQuery.parse(query)
        params: dict[str, Any] = {"type": "issues", "state": wanted.state, "limit": min(max(limit, 1), PER_PAGE)}
        if wanted.labels:
            params["labels"] = ",".join(wanted.labels)
        if wanted.words:
            params["q"] = wanted.words
        found: list[Issue] = []
        for data in self._rest.pages(f"listing {repo}'s issues", f"/repos/{repo}/issues", params):
            if not data.get("pull_request"):
                found.append(_issue(data))
            if len(found) >= limit:
                break
        return found

    def repository(self, repo: str) -> Repository:
        data = self._rest.json(f"reading {repo}", "GET", f"/repos/{repo}")
        return Repository(full_name=str(data.get("full_name") or repo), clone_url=str(data["clone_url"]),
                          default_branch=str(data.get("default_branch") or "main"),
                          can_push=bool((data.get("permissions") or {}).get("push")))

    def access(self, repo: str) -> Scopes:
        user = self._rest.json("reading the token's user", "GET", "/user")
        # Gitea's API does not say a token's scopes; what it may do shows in the repository's permissions.
        return Scopes(login=str(user.get("login") or ""), scopes=None, can_push=self.repository(repo).can_push)

    def me(self) -> str:
        return str(self._rest.json("reading the token's user", "GET", "/user").get("login") or "")

    def permission(self, repo: str, login: str) -> str:
        try:
            data = self._rest.json(f"reading {login}'s permission on {repo}", "GET",
                                   f"/repos/{repo}/collaborators/{login}/permission")
        except ForgeError as error:
            if error.code == "forge_not_found":
                return "none"
            raise
        permission = str(data.get("permission") or "none")
        return "admin" if permission == "owner" else permission

    def comment(self, ref: IssueRef, body: str) -> Comment:
        return _comment(self._rest.json(f"commenting on {ref}", "POST",
                                        f"/repos/{ref.repo}/issues/{ref.number}/comments", body={"body": body}))

    def react(self, ref: IssueRef, content: str, *, comment_id: int | None = None, on_line: bool = False) -> None:
        # A line comment of a pull request is a comment of its issue on Gitea: one endpoint.
        path = (f"/repos/{ref.repo}/issues/comments/{comment_id}/reactions" if comment_id is not None
                else f"/repos/{ref.repo}/issues/{ref.number}/reactions")
        self._rest.json(f"reacting on {ref}", "POST", path, body={"content": content})

    def find_pull(self, repo: str, branch: str) -> PullRequest | None:
        for data in self._rest.pages(f"listing {repo}'s pull requests", f"/repos/{repo}/pulls",
                                     {"state": "open", "limit": PER_PAGE}):
            head = data.get("head") or {}
            same_repo = str(((head.get("repo") or {}).get("full_name")) or repo).lower() == repo.lower()
            if head.get("ref") == branch and same_repo:
                return _pull(data)
        return None

    def open_pull(self, repo: str, *, branch: str, base: str, title: str, body: str, draft: bool) -> PullRequest:
        return _pull(self._rest.json(f"opening a pull request from {branch}", "POST", f"/repos/{repo}/pulls",
                                     body={"title": DRAFT + title if draft else title, "head": branch, "base": base,
                                           "body": body}))

    def pull(self, repo: str, number: int) -> PullRequest:
        return _pull(self._rest.json(f"reading {repo}#{number}", "GET", f"/repos/{repo}/pulls/{number}"))

    def review_comments(self, repo: str, number: int) -> list[ReviewComment]:
        """Every line comment of every review, oldest first; a later comment on a line that has one
        is a reply in that line's conversation (Gitea groups them so)."""
        first: dict[tuple[str, int | None], int] = {}
        found = []
        for raw in self._line_comments(repo, number):
            place = (str(raw.get("path") or ""), _line(raw))
            found.append(ReviewComment(id=int(raw["id"]), author=_login(raw), body=str(raw.get("body") or ""),
                                       path=place[0], line=place[1], in_reply_to=first.get(place),
                                       side="new" if int(raw.get("position") or 0) > 0 else "old",
                                       diff_hunk=str(raw.get("diff_hunk") or "")))
            first.setdefault(place, int(raw["id"]))
        return found

    def review_body(self, repo: str, number: int, review_id: int) -> str:
        data = self._rest.json(f"reading review {review_id} of {repo}#{number}", "GET",
                               f"/repos/{repo}/pulls/{number}/reviews/{review_id}")
        return str((data or {}).get("body") or "")

    def reply_review(self, repo: str, number: int, comment_id: int, body: str) -> None:
        raw = next((c for c in self._line_comments(repo, number) if int(c["id"]) == comment_id), None)
        if raw is None:
            raise ForgeError(f"{repo}#{number} has no line comment {comment_id}", code="forge_not_found")
        side = "new_position" if int(raw.get("position") or 0) > 0 else "old_position"
        self._rest.json(f"replying on {repo}#{number}", "POST", f"/repos/{repo}/pulls/{number}/reviews",
                        # No commit_id: Gitea puts the comment on the head, the commit errand just pushed.
                        body={"event": "COMMENT", "body": "",
                              "comments": [{"path": raw.get("path"), side: _line(raw), "body": body}]})

    def checks(self, repo: str, sha: str) -> list[CheckState]:
        data = self._rest.json(f"reading the statuses of {sha[:12]}", "GET", f"/repos/{repo}/commits/{sha}/status",
                               params={"limit": PER_PAGE})
        return [CheckState(str(s.get("context")), _STATES.get(str(s.get("status")), str(s.get("status"))),
                           s.get("target_url") or None, str(s.get("description") or ""))
                for s in (data or {}).get("statuses") or []]

    def _line_comments(self, repo: str, number: int) -> list[dict[str, Any]]:
        comments: list[dict[str, Any]] = []
        for review in self._rest.pages(f"reading {repo}#{number}'s reviews", f"/repos/{repo}/pulls/{number}/reviews",
                                       {"limit": PER_PAGE}):
            if int(review.get("comments_count") or 0) > 0:
                comments += self._rest.json(f"reading {repo}#{number}'s review comments", "GET",
                                            f"/repos/{repo}/pulls/{number}/reviews/{review['id']}/comments") or []
        return sorted(comments, key=lambda c: int(c["id"]))


def _login(data: dict[str, Any]) -> str:
    user = data.get("user")
    return str(user.get("login") or "") if isinstance(user, dict) else ""


def _line(comment: dict[str, Any]) -> int | None:
    return int(comment.get("position") or 0) or int(comment.get("original_position") or 0) or None


def _issue(data: dict[str, Any]) -> Issue:
    return Issue(number=int(data["number"]), title=str(data.get("title") or ""), body=str(data.get("body") or ""),
                 labels=tuple(str(label["name"]) for label in data.get("labels") or []),
                 author=_login(data), url=str(data.get("html_url") or ""), is_pull=bool(data.get("pull_request")))


def _comment(data: dict[str, Any]) -> Comment:
    return Comment(id=int(data["id"]), author=_login(data), body=str(data.get("body") or ""))


def _pull(data: dict[str, Any]) -> PullRequest:
    head = data.get("head") or {}
    title = str(data.get("title") or "")
    return PullRequest(number=int(data["number"]), url=str(data.get("html_url") or ""), head=str(head.get("ref")),
                       head_sha=head.get("sha"), state=str(data.get("state")),
                       draft=bool(data.get("draft")) or title.upper().startswith(("WIP:", "[WIP]")))
