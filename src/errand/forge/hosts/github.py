"""GitHub (and GitHub Enterprise, by its base URL) through ``githubkit``.

githubkit brings the token auth, the endpoints' paths and rate-limit detection
(403/429 with ``Retry-After`` or ``X-RateLimit-Reset``). Answers are read as
plain JSON into errand's own records: the typed models validate every field of
every object, and a GitHub Enterprise of another version, or one field GitHub
adds, must not stop a task. The HTTP cache is off: GitHub sends
``Cache-Control: private, max-age=60``, and a read right after a write (the
pull request just opened) must see the write.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import timedelta
from typing import Any, TypeVar

import httpx
from githubkit import GitHub, TokenAuthStrategy
from githubkit.exception import GitHubException, RateLimitExceeded, RequestError, RequestFailed
from githubkit.typing import RetryOption

from errand.forge.errors import ForgeError
from errand.forge.records import CheckState, Comment, Issue, PullRequest, Repository, ReviewComment, Scopes
from errand.forge.refs import IssueRef
from errand.forge.settings import DEFAULT_API

__all__ = ["DEFAULT_API", "GitHubForge"]

PER_PAGE = 100
MAX_PAGES = 50  # 5,000 comments: a thread longer than that is not an instruction
RATE_LIMIT_RETRIES = 3
_SAFE = frozenset({"GET", "HEAD"})
_MIN_WAIT = timedelta(milliseconds=50)
T = TypeVar("T")


class GitHubForge:
    """A :class:`~errand.forge.protocol.Forge` on GitHub's REST API at ``base_url``.

    ``max_wait`` bounds how long one request waits out a rate limit (seconds);
    a longer limit is a ``forge_rate_limited`` error that names the wait."""

    name = "github"

    def __init__(self, token: str, *, base_url: str = DEFAULT_API, max_wait: float = 60.0,
                 transport: httpx.BaseTransport | None = None) -> None:
        if not token:
            raise ForgeError("no GitHub token: set GITHUB_TOKEN (or the variable [forge] token_env names)",
                             code="forge_not_configured")
        self.base_url = base_url.rstrip("/")
        self._max_wait = max_wait
        # githubkit opens a new httpx client per request outside a `with`; one SSL context made here
        # spares each of them loading the CA bundle again (63 ms a request, measured; most of a pickup).
        self._github = GitHub(TokenAuthStrategy(token), base_url=self.base_url + "/", http_cache=False,
                              auto_retry=self._retry, timeout=30.0, user_agent="errand", transport=transport,
                              trust_env=False, ssl_verify=httpx.create_ssl_context())

    def _retry(self, error: GitHubException, count: int) -> RetryOption:
        """Rate limits are waited out when the wait is short; a 5xx is retried only for a read
        (a POST that failed after it created a pull request must not create another)."""
        if isinstance(error, RateLimitExceeded):
            wait = error.retry_after.total_seconds()
            # githubkit sleeps 60 s for a zero wait (it tests the timedelta's truth), so never pass it one.
            return RetryOption(count < RATE_LIMIT_RETRIES and wait <= self._max_wait,
                               max(error.retry_after, _MIN_WAIT))
        if isinstance(error, RequestFailed) and error.response.status_code >= 500:
            return RetryOption(count < 2 and error.request.method in _SAFE, timedelta(seconds=count + 1))
        return RetryOption(False)

    # ------------------------------------------------------------ requests

    def _call(self, what: str, request: Callable[[], T]) -> T:
        try:
            return request()
        except RateLimitExceeded as error:
            raise ForgeError(f"GitHub's rate limit stopped {what}: try again in "
                             f"{int(error.retry_after.total_seconds())} s", code="forge_rate_limited",
                             status=error.response.status_code) from None
        except RequestFailed as error:
            raise _failed(what, error.response.status_code, _message(error.response.raw_response)) from None
        except RequestError as error:
            raise ForgeError(f"GitHub at {self.base_url} could not be reached for {what}: {error}",
                             code="forge_unreachable") from None

    def _json(self, what: str, method: str, path: str, **options: Any) -> Any:
        response = self._call(what, lambda: self._github.request(method, path, **options))
        return response.json() if response.content else None

    def _pages(self, what: str, path: str, params: dict[str, Any] | None = None) -> Iterator[dict[str, Any]]:
        """Every item of a paged list, following the ``Link: rel="next"`` headers GitHub sends."""
        url: str | None = path
        query: dict[str, Any] | None = {"per_page": PER_PAGE, **(params or {})}
        for _ in range(MAX_PAGES):
            if url is None:
                return
            response = self._get(what, url, query)
            yield from response.json()
            url = response.raw_response.links.get("next", {}).get("url")
            query = None  # the next link carries its own query

    def _get(self, what: str, url: str, query: dict[str, Any] | None) -> Any:
        return self._call(what, lambda: self._github.request("GET", url, params=query))

    # ------------------------------------------------------------ the protocol

    def issue(self, ref: IssueRef) -> Issue:
        data = self._json(f"reading {ref}", "GET", f"/repos/{ref.repo}/issues/{ref.number}")
        comments = tuple(_comment(c) for c in self._pages(f"reading {ref}'s comments",
                                                          f"/repos/{ref.repo}/issues/{ref.number}/comments"))
        return replace(_issue(data), comments=comments)

    def search_issues(self, repo: str, query: str, limit: int) -> list[Issue]:
        data = self._json(f"searching {repo}'s issues", "GET", "/search/issues",
                          params={"q": f"repo:{repo} is:issue {query}", "per_page": min(max(limit, 1), PER_PAGE)})
        return [_issue(item) for item in (data.get("items") or [])[:limit]]

    def repository(self, repo: str) -> Repository:
        data = self._json(f"reading {repo}", "GET", f"/repos/{repo}")
        return Repository(full_name=str(data.get("full_name") or repo), clone_url=str(data["clone_url"]),
                          default_branch=str(data.get("default_branch") or "main"),
                          can_push=bool((data.get("permissions") or {}).get("push")))

    def access(self, repo: str) -> Scopes:
        response = self._call("reading the token's user", lambda: self._github.request("GET", "/user"))
        header = response.headers.get("x-oauth-scopes")
        return Scopes(login=_login({"user": response.json()}),
                      scopes=None if header is None else tuple(s.strip() for s in header.split(",") if s.strip()),
                      can_push=self.repository(repo).can_push)

    def me(self) -> str:
        return _login({"user": self._json("reading the token's user", "GET", "/user")})

    def permission(self, repo: str, login: str) -> str:
        data = self._json(f"reading {login}'s permission on {repo}", "GET",
                          f"/repos/{repo}/collaborators/{login}/permission")
        return str(data.get("permission") or "none")

    def comment(self, ref: IssueRef, body: str) -> Comment:
        return _comment(self._json(f"commenting on {ref}", "POST", f"/repos/{ref.repo}/issues/{ref.number}/comments",
                                   json={"body": body}))

    def react(self, ref: IssueRef, content: str, *, comment_id: int | None = None, on_line: bool = False) -> None:
        kind = "pulls" if on_line else "issues"
        path = (f"/repos/{ref.repo}/{kind}/comments/{comment_id}/reactions" if comment_id is not None
                else f"/repos/{ref.repo}/issues/{ref.number}/reactions")
        self._json(f"reacting on {ref}", "POST", path, json={"content": content})

    def find_pull(self, repo: str, branch: str) -> PullRequest | None:
        owner = repo.split("/")[0]
        for data in self._pages(f"listing {repo}'s pull requests", f"/repos/{repo}/pulls",
                                {"head": f"{owner}:{branch}", "state": "open"}):
            return _pull(data)
        return None

    def open_pull(self, repo: str, *, branch: str, base: str, title: str, body: str, draft: bool) -> PullRequest:
        return _pull(self._json(f"opening a pull request from {branch}", "POST", f"/repos/{repo}/pulls",
                                json={"title": title, "head": branch, "base": base, "body": body, "draft": draft}))

    def pull(self, repo: str, number: int) -> PullRequest:
        return _pull(self._json(f"reading {repo}#{number}", "GET", f"/repos/{repo}/pulls/{number}"))

    def review_comments(self, repo: str, number: int) -> list[ReviewComment]:
        return [_review_comment(c) for c in self._pages(f"reading {repo}#{number}'s review comments",
                                     f"/repos/{repo}/pulls/{number}/comments")]

    def review_body(self, repo: str, number: int, review_id: int) -> str:
        data = self._json(f"reading review {review_id} of {repo}#{number}", "GET",
                          f"/repos/{repo}/pulls/{number}/reviews/{review_id}")
        return str((data or {}).get("body") or "")

    def reply_review(self, repo: str, number: int, comment_id: int, body: str) -> None:
        self._json(f"replying on {repo}#{number}", "POST",
                   f"/repos/{repo}/pulls/{number}/comments/{comment_id}/replies", json={"body": body})

    def checks(self, repo: str, sha: str) -> list[CheckState]:
        runs = self._json(f"reading the checks of {sha[:12]}", "GET", f"/repos/{repo}/commits/{sha}/check-runs")
        status = self._json(f"reading the statuses of {sha[:12]}", "GET", f"/repos/{repo}/commits/{sha}/status")
        found = [CheckState(str(r.get("name")), str(r.get("conclusion") or r.get("status") or "pending"),
                            r.get("html_url"), _output(r)) for r in runs.get("check_runs") or []]
        found += [CheckState(str(s.get("context")), str(s.get("state")), s.get("target_url"))
                  for s in status.get("statuses") or []]
        return found


def _review_comment(c: dict[str, Any]) -> ReviewComment:
    """A line comment: ``line`` and ``start_line`` where it is now, else (outdated) where it was made."""
    current = c.get("line") is not None
    return ReviewComment(id=int(c["id"]), author=_login(c), body=str(c.get("body") or ""),
                         path=str(c.get("path") or ""), line=c.get("line") if current else c.get("original_line"),
                         in_reply_to=c.get("in_reply_to_id"),
                         start_line=c.get("start_line") if current else c.get("original_start_line"),
                         side="old" if c.get("side") == "LEFT" else "new", diff_hunk=str(c.get("diff_hunk") or ""))


def _login(data: dict[str, Any]) -> str:
    user = data.get("user")
    return str(user.get("login") or "") if isinstance(user, dict) else str(data.get("login") or "")


def _user_id(data: dict[str, Any]) -> int | None:
    user = data.get("user")
    found = user.get("id") if isinstance(user, dict) else None
    return found if isinstance(found, int) and not isinstance(found, bool) else None


def _output(run: dict[str, Any]) -> str:
    output = run.get("output") or {}
    return "\n".join(str(output.get(key)) for key in ("title", "summary", "text") if output.get(key))[:4000]


def _issue(data: dict[str, Any]) -> Issue:
    return Issue(number=int(data["number"]), title=str(data.get("title") or ""), body=str(data.get("body") or ""),
                 labels=tuple(str(label["name"]) for label in data.get("labels") or []),
                 author=_login(data), url=str(data.get("html_url") or ""), is_pull=bool(data.get("pull_request")),
                 author_id=_user_id(data))


def _comment(data: dict[str, Any]) -> Comment:
    return Comment(id=int(data["id"]), author=_login(data), body=str(data.get("body") or ""))


def _pull(data: dict[str, Any]) -> PullRequest:
    head = data.get("head") or {}
    head_repo = str((head.get("repo") or {}).get("full_name") or "") or None
    base_repo = str(((data.get("base") or {}).get("repo") or {}).get("full_name") or "") or None
    return PullRequest(number=int(data["number"]), url=str(data.get("html_url") or ""), head=str(head.get("ref")),
                       head_sha=head.get("sha"), state=str(data.get("state")), draft=bool(data.get("draft")),
                       head_repo=head_repo if head_repo and head_repo != base_repo else None,
                       maintainer_can_modify=bool(data.get("maintainer_can_modify")), author=_login(data))


def _message(response: httpx.Response) -> str:
    try:
        data = response.json()
    except ValueError:
        return response.text[:200]
    errors = "; ".join(str(e.get("message") or f"{e.get('field')} {e.get('code')}") for e in data.get("errors") or [])
    return f"{data.get('message', '')}{': ' + errors if errors else ''}"


def _failed(what: str, status: int, message: str) -> ForgeError:
    if status in (401, 403):
        return ForgeError(f"GitHub refused {what} ({status} {message}): check the token and its access to the "
                          "repository (`errand forge connect github --repo OWNER/NAME` says what is missing)",
                          code="forge_auth", status=status)
    if status == 404:
        return ForgeError(f"GitHub found nothing for {what} (404): check the repository's name and the token's "
                          "access", code="forge_not_found", status=status)
    if status == 422:
        return ForgeError(f"GitHub refused {what} (422 {message})", code="forge_refused", status=status)
    return ForgeError(f"GitHub failed {what} ({status} {message})", status=status)
