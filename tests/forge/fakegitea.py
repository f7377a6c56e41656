"""A loopback Gitea of the tests' own: the ``/api/v1`` endpoints errand uses, with state
(issues, comments, reactions, labels, pull requests, reviews with line comments, commit
statuses), its repositories served by the real ``git http-backend``.

As Gitea does it: ``Authorization: token …``; ``limit``/``page`` paging with ``Link``
headers; a pull request from a branch the repository lacks is a 404, one with no changes
a 422, a second open one from the same branch a 409; drafts are ``WIP:`` titles; webhook
deliveries carry ``X-Gitea-Event``, ``X-Gitea-Event-Type``, ``X-Gitea-Delivery`` and
``X-Gitea-Signature`` (hex HMAC-SHA256 of the raw body) — or the ``X-Forgejo-*`` twins.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from .fakeforge import Answer, FakeForge, now, page_of

OWNER, R, N = r"([^/]+)", r"([^/]+)", r"(\d+)"


@dataclass
class Repo:
    owner: str
    name: str
    issues: dict[int, dict[str, Any]] = field(default_factory=dict)
    comments: dict[int, list[dict[str, Any]]] = field(default_factory=dict)  # issue/pull number -> comments
    reactions: list[dict[str, Any]] = field(default_factory=list)
    pulls: dict[int, dict[str, Any]] = field(default_factory=dict)
    reviews: dict[int, list[dict[str, Any]]] = field(default_factory=dict)  # pull -> reviews (with "_comments")
    permissions: dict[str, str] = field(default_factory=dict)  # login -> owner|admin|write|read|none
    statuses: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # sha -> commit statuses

    @property
    def full_name(self) -> str:
        return f"{self.owner}/{self.name}"

    def line_comments(self, number: int) -> list[dict[str, Any]]:
        return [c for review in self.reviews.get(number, []) for c in review["_comments"]]


class FakeGitea(FakeForge):
    api = "/api/v1"

    def __init__(self, root: Path, *, token: str, webhook_secret: str = "") -> None:
        self.repos: dict[str, Repo] = {}
        super().__init__(root, token=token, webhook_secret=webhook_secret)

    def authorized(self, headers: dict[str, str]) -> bool:
        return headers.get("authorization") == f"token {self.token}"

    # ------------------------------------------------------------ state a test sets up

    def add_repo(self, full_name: str, source: Path) -> Repo:
        owner, name = full_name.split("/")
        self.add_bare(full_name, source)
        self.repos[full_name] = Repo(owner, name, permissions={owner: "owner", "errand-bot": "write"})
        return self.repos[full_name]

    def add_issue(self, full_name: str, title: str, body: str, *, labels: tuple[str, ...] = (),
                  user: str = "gitte") -> dict[str, Any]:
        repo = self.repos[full_name]
        number = self._number(repo)
        issue = {"id": self.new_id(), "number": number, "title": title, "body": body, "state": "open",
                 "user": {"login": user}, "labels": [{"id": self.new_id(), "name": label} for label in labels],
                 "html_url": f"{self.url}/{full_name}/issues/{number}", "pull_request": None}
        repo.issues[number] = issue
        repo.comments[number] = []
        return issue

    def add_comment(self, full_name: str, number: int, body: str, *, user: str = "gitte") -> dict[str, Any]:
        comment = {"id": self.new_id(), "body": body, "user": {"login": user}, "created_at": now(),
                   "html_url": f"{self.url}/{full_name}/issues/{number}#issuecomment"}
        with self._lock:
            self.repos[full_name].comments.setdefault(number, []).append(comment)
        return comment

    def add_review(self, full_name: str, number: int, body: str, *, comments: tuple[tuple[str, int, str], ...] = (),
                   user: str = "gitte", state: str = "REQUEST_CHANGES") -> dict[str, Any]:
        """A submitted review with line comments ``(path, new line, body)``."""
        repo = self.repos[full_name]
        pull = repo.pulls[number]
        review = {"id": self.new_id(), "user": {"login": user}, "body": body, "state": state,
                  "commit_id": pull["head"]["sha"], "_comments": []}
        for path, line, text in comments:
            review["_comments"].append({"id": self.new_id(), "body": text, "user": {"login": user}, "path": path,
                                        "position": line, "original_position": 0, "commit_id": pull["head"]["sha"],
                                        "pull_request_review_id": review["id"], "created_at": now()})
        with self._lock:
            repo.reviews.setdefault(number, []).append(review)
        return review

    # ------------------------------------------------------------ webhooks

    def signature(self, body: bytes, secret: str | None = None) -> str:
        key = (self.webhook_secret if secret is None else secret).encode()
        return hmac.new(key, body, hashlib.sha256).hexdigest()

    def deliver(self, target: str, event: str, payload: dict[str, Any], *, event_type: str | None = None,
                delivery: str | None = None, secret: str | None = None, forgejo: bool = False,
                headers: dict[str, str] | None = None) -> httpx.Response:
        """POST a webhook delivery to ``target`` as Gitea (or Forgejo) does."""
        body = json.dumps(payload).encode()
        vendor = "Forgejo" if forgejo else "Gitea"
        sent = {"Content-Type": "application/json", "User-Agent": "Go-http-client/1.1",
                f"X-{vendor}-Event": event, f"X-{vendor}-Event-Type": event_type or event,
                f"X-{vendor}-Delivery": delivery or str(uuid.uuid4()),
                f"X-{vendor}-Signature": self.signature(body, secret), **(headers or {})}
        return httpx.post(target, content=body, headers=sent, timeout=30)

    def hook_repo(self, full_name: str) -> dict[str, Any]:
        repo = self.repos[full_name]
        return {"id": 1, "full_name": full_name, "name": repo.name, "owner": {"login": repo.owner},
                "html_url": f"{self.url}/{full_name}"}

    def label_payload(self, full_name: str, number: int, *, sender: str | None = None) -> dict[str, Any]:
        """``issues`` / ``issue_label``: Gitea says the labels changed, not which one."""
        return {"action": "label_updated", "number": number, "issue": self.repos[full_name].issues[number],
                "repository": self.hook_repo(full_name),
                "sender": {"login": sender or self.repos[full_name].owner}}

    def comment_payload(self, full_name: str, number: int, comment: dict[str, Any]) -> dict[str, Any]:
        repo = self.repos[full_name]
        issue = repo.issues.get(number) or repo.pulls[number]
        return {"action": "created", "issue": issue, "comment": comment, "repository": self.hook_repo(full_name),
                "sender": comment["user"], "is_pull": number in repo.pulls}

    def review_payload(self, full_name: str, number: int, review: dict[str, Any], *,
                       kind: str = "pull_request_review_rejected") -> dict[str, Any]:
        return {"action": "reviewed", "number": number, "pull_request": self.repos[full_name].pulls[number],
                "review": {"type": kind, "content": review["body"]}, "repository": self.hook_repo(full_name),
                "sender": review["user"]}

    # ------------------------------------------------------------ internals

    def _number(self, repo: Repo) -> int:
        with self._lock:
            return max([0, *repo.issues, *repo.pulls]) + 1

    def _repo(self, owner: str, name: str) -> Repo:
        return self.repos[f"{owner}/{name}"]

    def _paged(self, items: list[Any], query: dict[str, list[str]], path: str) -> Answer:
        return page_of(items, query, size="limit", default=30, link=f"{self.url}{path}", next_page_header=False)

    # ------------------------------------------------------------ the REST side

    def routes(self) -> list[tuple[str, str, Callable[..., Answer]]]:
        return [
            ("GET", r"/user", self._user),
            ("GET", rf"/repos/{OWNER}/{R}", self._get_repo),
            ("GET", rf"/repos/{OWNER}/{R}/collaborators/([^/]+)/permission", self._permission),
            ("GET", rf"/repos/{OWNER}/{R}/issues", self._list_issues),
            ("GET", rf"/repos/{OWNER}/{R}/issues/{N}", self._get_issue),
            ("GET", rf"/repos/{OWNER}/{R}/issues/{N}/comments", self._list_comments),
            ("POST", rf"/repos/{OWNER}/{R}/issues/{N}/comments", self._create_comment),
            ("POST", rf"/repos/{OWNER}/{R}/issues/{N}/reactions", self._react_issue),
            ("POST", rf"/repos/{OWNER}/{R}/issues/comments/{N}/reactions", self._react_comment),
            ("GET", rf"/repos/{OWNER}/{R}/pulls", self._list_pulls),
            ("POST", rf"/repos/{OWNER}/{R}/pulls", self._create_pull),
            ("GET", rf"/repos/{OWNER}/{R}/pulls/{N}", self._get_pull),
            ("GET", rf"/repos/{OWNER}/{R}/pulls/{N}/reviews", self._list_reviews),
            ("POST", rf"/repos/{OWNER}/{R}/pulls/{N}/reviews", self._create_review),
            ("GET", rf"/repos/{OWNER}/{R}/pulls/{N}/reviews/{N}/comments", self._review_comments),
            ("GET", rf"/repos/{OWNER}/{R}/commits/([^/]+)/status", self._combined_status),
        ]

    def _user(self, **_: Any) -> Answer:
        return 200, {"id": 7, "login": "errand-bot", "full_name": "errand"}, {}

    def _get_repo(self, owner: str, name: str, **_: Any) -> Answer:
        full = f"{owner}/{name}"
        if full not in self.repos:
            return 404, {"message": "The target couldn't be found.", "errors": []}, {}
        return 200, {"full_name": full, "clone_url": self.clone_url(full), "default_branch": "main",
                     "permissions": {"admin": True, "push": True, "pull": True}}, {}

    def _permission(self, owner: str, name: str, user: str, **_: Any) -> Answer:
        return 200, {"permission": self._repo(owner, name).permissions.get(user, "read"), "user": {"login": user}}, {}

    def _list_issues(self, owner: str, name: str, *, query: dict[str, list[str]], **_: Any) -> Answer:
        repo = self._repo(owner, name)
        found = list(repo.issues.values())
        state = query.get("state", ["open"])[0]
        if state != "all":
            found = [i for i in found if i["state"] == state]
        for label in (query.get("labels", [""])[0].split(",") if query.get("labels") else []):
            found = [i for i in found if label in [x["name"] for x in i["labels"]]]
        if query.get("q"):
            found = [i for i in found if query["q"][0].lower() in (i["title"] + i["body"]).lower()]
        return self._paged(found, query, f"{self.api}/repos/{owner}/{name}/issues")

    def _get_issue(self, owner: str, name: str, number: str, **_: Any) -> Answer:
        repo = self._repo(owner, name)
        issue = repo.issues.get(int(number)) or repo.pulls.get(int(number))
        return (200, issue, {}) if issue else (404, {"message": "The target couldn't be found."}, {})

    def _list_comments(self, owner: str, name: str, number: str, *, query: dict[str, list[str]],
                       **_: Any) -> Answer:
        return self._paged(self._repo(owner, name).comments.get(int(number), []), query,
                           f"{self.api}/repos/{owner}/{name}/issues/{number}/comments")

    def _create_comment(self, owner: str, name: str, number: str, *, body: Any, **_: Any) -> Answer:
        return 201, self.add_comment(f"{owner}/{name}", int(number), body["body"], user="errand-bot"), {}

    def _react(self, repo: Repo, target: str, body: Any) -> Answer:
        reaction = {"user": {"login": "errand-bot"}, "content": body["content"], "target": target,
                    "created_at": now(), "_t": time.monotonic()}
        repo.reactions.append(reaction)
        return 201, reaction, {}

    def _react_issue(self, owner: str, name: str, number: str, *, body: Any, **_: Any) -> Answer:
        return self._react(self._repo(owner, name), f"issue:{number}", body)

    def _react_comment(self, owner: str, name: str, comment: str, *, body: Any, **_: Any) -> Answer:
        return self._react(self._repo(owner, name), f"comment:{comment}", body)

    def _list_pulls(self, owner: str, name: str, *, query: dict[str, list[str]], **_: Any) -> Answer:
        pulls = list(self._repo(owner, name).pulls.values())
        state = query.get("state", ["open"])[0]
        if state != "all":
            pulls = [p for p in pulls if p["state"] == state]
        return self._paged(pulls, query, f"{self.api}/repos/{owner}/{name}/pulls")

    def _create_pull(self, owner: str, name: str, *, body: Any, **_: Any) -> Answer:
        full = f"{owner}/{name}"
        repo = self._repo(owner, name)
        head, base = self.branch_head(full, body["head"]), self.branch_head(full, body["base"])
        if head is None or base is None:
            return 404, {"message": "The target couldn't be found.", "errors": []}, {}
        if head == base:
            return 422, {"message": "Invalid PullRequest: There are no changes between the head and the base"}, {}
        for pull in repo.pulls.values():
            if pull["head"]["ref"] == body["head"] and pull["state"] == "open":
                return 409, {"message": f"pull request already exists for these targets [id: {pull['id']}, "
                                        f"head_branch: {body['head']}, base_branch: {body['base']}]"}, {}
        number = self._number(repo)
        pull = {"id": self.new_id(), "number": number, "title": body["title"], "body": body.get("body"),
                "state": "open", "user": {"login": "errand-bot"}, "draft": body["title"].startswith("WIP:"),
                "head": {"ref": body["head"], "sha": head, "repo": {"full_name": full}},
                "base": {"ref": body["base"], "repo": {"full_name": full}},
                "html_url": f"{self.url}/{full}/pulls/{number}", "pull_request": {"merged": False},
                "_t": time.monotonic()}
        repo.pulls[number] = pull
        repo.comments[number] = []
        return 201, pull, {}

    def _get_pull(self, owner: str, name: str, number: str, **_: Any) -> Answer:
        pull = self._repo(owner, name).pulls.get(int(number))
        if pull is None:
            return 404, {"message": "The target couldn't be found."}, {}
        pull["head"]["sha"] = self.branch_head(f"{owner}/{name}", pull["head"]["ref"])
        return 200, pull, {}

    def _list_reviews(self, owner: str, name: str, number: str, *, query: dict[str, list[str]], **_: Any) -> Answer:
        reviews = [{**{k: v for k, v in r.items() if k != "_comments"}, "comments_count": len(r["_comments"])}
                   for r in self._repo(owner, name).reviews.get(int(number), [])]
        return self._paged(reviews, query, f"{self.api}/repos/{owner}/{name}/pulls/{number}/reviews")

    def _review_comments(self, owner: str, name: str, number: str, review: str, **_: Any) -> Answer:
        for found in self._repo(owner, name).reviews.get(int(number), []):
            if found["id"] == int(review):
                return 200, found["_comments"], {}
        return 404, {"message": "The target couldn't be found."}, {}

    def _create_review(self, owner: str, name: str, number: str, *, body: Any, **_: Any) -> Answer:
        if body.get("event") == "COMMENT" and not body.get("body") and not body.get("comments"):
            return 422, {"message": "review event COMMENT requires a body or a comment"}, {}
        review = self.add_review(f"{owner}/{name}", int(number), body.get("body") or "", user="errand-bot",
                                 state=str(body.get("event") or "COMMENT"))
        for comment in body.get("comments") or []:
            line = int(comment.get("new_position") or 0)
            review["_comments"].append({"id": self.new_id(), "body": comment["body"], "path": comment["path"],
                                        "user": {"login": "errand-bot"}, "position": line,
                                        "original_position": 0 if line else int(comment.get("old_position") or 0),
                                        "pull_request_review_id": review["id"], "created_at": now()})
        return 200, {k: v for k, v in review.items() if k != "_comments"}, {}

    def _combined_status(self, owner: str, name: str, ref: str, **_: Any) -> Answer:
        statuses = self._repo(owner, name).statuses.get(ref, [])
        state = "pending" if not statuses else ("success" if all(s["status"] == "success" for s in statuses)
                                                else "failure")
        return 200, {"state": state, "sha": ref, "total_count": len(statuses), "statuses": statuses}, {}
