"""GitLab (gitlab.com or self-hosted, REST v4) through plain httpx.

GitLab's words for errand's: a project (``group/sub/project``, addressed URL-encoded) is a
repository; a merge request (``!7``, numbered apart from issues) is a pull request; notes
are comments; a discussion with a position is a line comment's thread; award emoji are
reactions; commit statuses (each pipeline job writes one) are the checks. A draft is a
``Draft:`` title. Resolved discussions are left out of a review round: a person marked
them done.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

import httpx

from errand.forge.errors import ForgeError
from errand.forge.hosts.query import IssueQuery
from errand.forge.hosts.rest import RestClient
from errand.forge.records import CheckState, Comment, Issue, PullRequest, Repository, ReviewComment, Scopes
from errand.forge.refs import IssueRef

__all__ = ["DEFAULT_GITLAB", "GitLabForge"]

DEFAULT_GITLAB = "https://gitlab.com/api/v4"
PER_PAGE = 100
DRAFT = "Draft: "
DEVELOPER = 30  # the access level that may push
_EMOJI = {"+1": "thumbsup", "-1": "thumbsdown", "laugh": "laughing", "hooray": "tada", "confused": "confused",
          "heart": "heart", "rocket": "rocket", "eyes": "eyes"}
_ROLES = [(50, "admin"), (40, "maintain"), (30, "write"), (20, "triage"), (5, "read")]
_STATES = {"failed": "failure", "canceled": "cancelled", "success": "success", "skipped": "skipped",
           "manual": "neutral"}  # created, pending, running, scheduled…: pending
_JOB = re.compile(r"/-/jobs/(\d+)/?$")
_TRACE = 4000


class GitLabForge:
    """A :class:`~errand.forge.protocol.Forge` on GitLab's REST API at ``base_url``."""

    name = "gitlab"

    def __init__(self, token: str, *, base_url: str = DEFAULT_GITLAB, max_wait: float = 60.0,
                 transport: httpx.BaseTransport | None = None) -> None:
        if not token:
            raise ForgeError("no GitLab token: set GITLAB_TOKEN (or the variable [gitlab] token_env names)",
                             code="forge_not_configured")
        self.base_url = (base_url or DEFAULT_GITLAB).rstrip("/")
        self._rest = RestClient("GitLab", self.base_url, {"PRIVATE-TOKEN": token}, max_wait=max_wait,
                                hint="errand forge connect gitlab --repo GROUP/PROJECT", transport=transport)

    # ------------------------------------------------------------ issues

    def issue(self, ref: IssueRef) -> Issue:
        where = f"{_project(ref.repo)}/{_kind(ref)}/{ref.number}"
        data = self._rest.json(f"reading {ref}", "GET", where)
        notes = tuple(_comment(n) for n in self._rest.pages(
            f"reading {ref}'s notes", f"{where}/notes", {"sort": "asc", "order_by": "created_at",
                                                         "per_page": PER_PAGE}) if not n.get("system"))
        issue = _issue(data, is_pull=ref.pull)
        return Issue(issue.number, issue.title, issue.body, issue.labels, issue.author, issue.url, notes,
                     issue.is_pull)

    def search_issues(self, repo: str, query: str, limit: int) -> list[Issue]:
        wanted = IssueQuery.parse(query)
        params: dict[str, Any] = {"state": {"open": "opened"}.get(wanted.state, wanted.state),
                                  "per_page": min(max(limit, 1), PER_PAGE)}
        if wanted.labels:
            params["labels"] = ",".join(wanted.labels)
        if wanted.words:
            params["search"] = wanted.words
        found: list[Issue] = []
        for data in self._rest.pages(f"listing {repo}'s issues", f"{_project(repo)}/issues", params):
            found.append(_issue(data))
            if len(found) >= limit:
                break
        return found

    def comment(self, ref: IssueRef, body: str) -> Comment:
        return _comment(self._rest.json(f"commenting on {ref}", "POST",
                                        f"{_project(ref.repo)}/{_kind(ref)}/{ref.number}/notes", body={"body": body}))

    def react(self, ref: IssueRef, content: str, *, comment_id: int | None = None, on_line: bool = False) -> None:
        # A discussion's line note is a note of its merge request: one endpoint.
        where = f"{_project(ref.repo)}/{_kind(ref)}/{ref.number}"
        if comment_id is not None:
            where += f"/notes/{comment_id}"
        try:
            self._rest.json(f"reacting on {ref}", "POST", f"{where}/award_emoji",
                            body={"name": _EMOJI.get(content, content)})
        except ForgeError as error:
            # Awarded already (GitLab answers that with a 404 "…has already been taken"): it is there.
            if error.code != "forge_refused" and "already been taken" not in error.message:
                raise

    # ------------------------------------------------------------ the project and who may do what

    def repository(self, repo: str) -> Repository:
        data = self._rest.json(f"reading {repo}", "GET", _project(repo))
        permissions = data.get("permissions") or {}
        level = max(int((permissions.get(key) or {}).get("access_level") or 0)
                    for key in ("project_access", "group_access"))
        return Repository(full_name=str(data.get("path_with_namespace") or repo),
                          clone_url=str(data["http_url_to_repo"]),
                          default_branch=str(data.get("default_branch") or "main"), can_push=level >= DEVELOPER)

    def access(self, repo: str) -> Scopes:
        user = self._rest.json("reading the token's user", "GET", "/user")
        try:
            token = self._rest.json("reading the token's scopes", "GET", "/personal_access_tokens/self")
            scopes: tuple[str, ...] | None = tuple(str(s) for s in token.get("scopes") or [])
        except ForgeError as error:
            if error.code not in ("forge_not_found", "forge_auth"):  # an older GitLab, or not a personal token
                raise
            scopes = None
        return Scopes(login=str(user.get("username") or ""), scopes=scopes, can_push=self.repository(repo).can_push)

    def review_body(self, repo: str, number: int, review_id: int) -> str:
        return ""  # a GitLab review is its notes: each one comes as its own delivery

    def me(self) -> str:
        return str(self._rest.json("reading the token's user", "GET", "/user").get("username") or "")

    def permission(self, repo: str, login: str) -> str:
        users = self._rest.json(f"finding @{login}", "GET", "/users", params={"username": login}) or []
        if not users:
            return "none"
        try:
            member = self._rest.json(f"reading {login}'s access to {repo}", "GET",
                                     f"{_project(repo)}/members/all/{int(users[0]['id'])}")
        except ForgeError as error:
            if error.code == "forge_not_found":
                return "none"
            raise
        level = int(member.get("access_level") or 0)
        return next((role for floor, role in _ROLES if level >= floor), "none")

    # ------------------------------------------------------------ merge requests

    def find_pull(self, repo: str, branch: str) -> PullRequest | None:
        for data in self._rest.pages(f"listing {repo}'s merge requests", f"{_project(repo)}/merge_requests",
                                     {"source_branch": branch, "state": "opened", "per_page": PER_PAGE}):
            if data.get("source_project_id") in (None, data.get("target_project_id")):  # not a fork's
                return _pull(data)
        return None

    def open_pull(self, repo: str, *, branch: str, base: str, title: str, body: str, draft: bool) -> PullRequest:
        return _pull(self._rest.json(f"opening a merge request from {branch}", "POST",
                                     f"{_project(repo)}/merge_requests",
                                     body={"source_branch": branch, "target_branch": base, "description": body,
                                           "title": DRAFT + title if draft else title}))

    def pull(self, repo: str, number: int) -> PullRequest:
        return _pull(self._rest.json(f"reading {repo}!{number}", "GET", f"{_project(repo)}/merge_requests/{number}"))

    def review_comments(self, repo: str, number: int) -> list[ReviewComment]:
        found = []
        for discussion in self._discussions(repo, number):
            notes = [n for n in discussion.get("notes") or [] if not n.get("system")]
            if not notes or not notes[0].get("position") or notes[0].get("resolved"):
                continue
            first = int(notes[0]["id"])
            for note in notes:
                position = note.get("position") or notes[0]["position"]
                found.append(ReviewComment(id=int(note["id"]), author=_username(note), body=str(note.get("body") or ""),
                                           path=str(position.get("new_path") or position.get("old_path") or ""),
                                           line=position.get("new_line") or position.get("old_line"),
                                           in_reply_to=None if int(note["id"]) == first else first,
                                           side="new" if position.get("new_line") else "old"))
        return found

    def reply_review(self, repo: str, number: int, comment_id: int, body: str) -> None:
        discussion = next((d for d in self._discussions(repo, number)
                           if any(int(n["id"]) == comment_id for n in d.get("notes") or [])), None)
        if discussion is None:
            raise ForgeError(f"{repo}!{number} has no note {comment_id}", code="forge_not_found")
        self._rest.json(f"replying on {repo}!{number}", "POST",
                        f"{_project(repo)}/merge_requests/{number}/discussions/{discussion['id']}/notes",
                        body={"body": body})

    def checks(self, repo: str, sha: str) -> list[CheckState]:
        found = []
        for status in self._rest.pages(f"reading the statuses of {sha[:12]}",
                                       f"{_project(repo)}/repository/commits/{sha}/statuses", {"per_page": PER_PAGE}):
            state = _STATES.get(str(status.get("status")), "pending")
            url = status.get("target_url") or None
            detail = str(status.get("description") or "")
            if state == "failure" and url:
                detail = self._trace(repo, url) or detail
            found.append(CheckState(str(status.get("name")), state, url, detail))
        return found

    def _trace(self, repo: str, url: str) -> str:
        """The end of a failed job's log, where the failure usually is (what a CI-fix round needs)."""
        job = _JOB.search(url)
        if job is None:
            return ""
        try:
            response = self._rest.request(f"reading job {job.group(1)}'s log", "GET",
                                          f"{_project(repo)}/jobs/{job.group(1)}/trace")
        except ForgeError:
            return ""  # the status says enough without it
        return response.text[-_TRACE:]

    def _discussions(self, repo: str, number: int) -> list[dict[str, Any]]:
        return list(self._rest.pages(f"reading {repo}!{number}'s discussions",
                                     f"{_project(repo)}/merge_requests/{number}/discussions", {"per_page": PER_PAGE}))


def _project(repo: str) -> str:
    return "/projects/" + quote(repo, safe="")


def _kind(ref: IssueRef) -> str:
    return "merge_requests" if ref.pull else "issues"


def _username(data: dict[str, Any]) -> str:
    author = data.get("author")
    return str(author.get("username") or "") if isinstance(author, dict) else ""


def _issue(data: dict[str, Any], *, is_pull: bool = False) -> Issue:
    labels = [label if isinstance(label, str) else label.get("name") for label in data.get("labels") or []]
    return Issue(number=int(data["iid"]), title=str(data.get("title") or ""), body=str(data.get("description") or ""),
                 labels=tuple(str(label) for label in labels), author=_username(data),
                 url=str(data.get("web_url") or ""), is_pull=is_pull)


def _comment(data: dict[str, Any]) -> Comment:
    return Comment(id=int(data["id"]), author=_username(data), body=str(data.get("body") or ""))


def _pull(data: dict[str, Any]) -> PullRequest:
    state = str(data.get("state") or "")
    return PullRequest(number=int(data["iid"]), url=str(data.get("web_url") or ""),
                       head=str(data.get("source_branch")), head_sha=data.get("sha"),
                       state="open" if state == "opened" else state,
                       draft=bool(data.get("draft") or data.get("work_in_progress")))
