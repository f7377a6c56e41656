"""A loopback GitHub of the tests' own: the REST endpoints errand uses, with state, and
its repositories served over git's smart HTTP protocol by the real ``git http-backend``.

The real githubkit client and the real ``git push`` talk to it. It checks the token
on every request (REST: ``Authorization: token|Bearer``; git: Basic with the token as
password, as GitHub takes it), signs webhook deliveries with HMAC-SHA256 as GitHub
does (``X-Hub-Signature-256: sha256=<hex>`` over the raw body), answers 422 to a pull
request whose head branch is not in the repository, and can be told to rate-limit.

On a bad day, as GitHub may: with ``echo_to`` set, a comment written through the API has
its ``issue_comment`` webhook delivered there (twice, one delivery id) *before* the API
call that wrote it is answered, so its writer cannot know the comment's id yet. The token
acts as ``errand-bot``, which may write to every repository (it pushes errand's branches).
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import re
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx

from .gitremote import basic_user, serve_git
from .gitremote import git as _git
from .gitremote import git_env as _git_env

API = "/api/v3"  # GitHub Enterprise's layout: errand is given the base URL, as for GHE
ME = "errand-bot"  # the account the token acts as


@dataclass
class Repo:
    owner: str
    name: str
    bare: Path
    issues: dict[int, dict[str, Any]] = field(default_factory=dict)
    comments: dict[int, list[dict[str, Any]]] = field(default_factory=dict)  # issue/PR number -> comments
    reactions: list[dict[str, Any]] = field(default_factory=list)
    pulls: dict[int, dict[str, Any]] = field(default_factory=dict)
    review_comments: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    permissions: dict[str, str] = field(default_factory=dict)  # login -> admin|write|read|none
    check_runs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # sha -> check runs
    statuses: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # sha -> statuses
    reviews: dict[int, list[dict[str, Any]]] = field(default_factory=dict)  # PR number -> reviews posted
    fork_of: str | None = None  # the repository this one is a fork of

    @property
    def full_name(self) -> str:
        return f"{self.owner}/{self.name}"


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


class FakeGitHub:
    """``url`` is the web root; ``api_url`` the REST base URL errand is configured with."""

    def __init__(self, root: Path, *, token: str, webhook_secret: str = "") -> None:
        self.root = root
        self.token = token
        self.webhook_secret = webhook_secret
        self.scopes = "repo, workflow"
        self.repos: dict[str, Repo] = {}
        self.requests: list[Seen] = []
        self.fail_next: list[tuple[int, dict[str, str]]] = []  # (status, headers) answered before the real one
        self.echo_to: str | None = None  # a webhook URL: see the module's docstring
        self.echoes: list[tuple[str, int, Any]] = []  # each echo: the comment's body, errand's status and answer
        self._ids = itertools.count(1000)
        self._user_ids: dict[str, int] = {}
        self._lock = threading.RLock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.02,), daemon=True)

    # ------------------------------------------------------------ lifecycle

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def api_url(self) -> str:
        return self.url + API

    def start(self) -> FakeGitHub:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    # ------------------------------------------------------------ state a test sets up

    def add_repo(self, full_name: str, source: Path) -> Repo:
        """A repository whose remote is a bare clone of ``source``."""
        owner, name = full_name.split("/")
        bare = self.root / "git" / owner / f"{name}.git"
        bare.parent.mkdir(parents=True, exist_ok=True)
        _git(None, "clone", "-q", "--bare", str(source), str(bare))
        repo = Repo(owner, name, bare, permissions={owner: "admin", ME: "write"})
        self.repos[full_name] = repo
        return repo

    def clone_url(self, full_name: str) -> str:
        return f"{self.url}/{full_name}.git"

    def user(self, login: str) -> dict[str, Any]:
        """A user as GitHub shows one: its login and its numeric id (stable per login)."""
        with self._lock:
            number = self._user_ids.setdefault(login, 5000 + len(self._user_ids))
        return {"login": login, "id": number, "type": "Bot" if login.endswith("[bot]") else "User"}

    def add_fork(self, full_name: str, of: str) -> Repo:
        """``full_name``, a fork of ``of``: its own bare repository, cloned from the original's."""
        owner, name = full_name.split("/")
        bare = self.root / "git" / owner / f"{name}.git"
        bare.parent.mkdir(parents=True, exist_ok=True)
        _git(None, "clone", "-q", "--bare", str(self.repos[of].bare), str(bare))
        repo = Repo(owner, name, bare, permissions={owner: "admin"}, fork_of=of)
        self.repos[full_name] = repo
        return repo

    def open_fork_pull(self, base: str, fork: str, branch: str, title: str, *, user: str,
                       maintainer_can_modify: bool) -> dict[str, Any]:
        """A pull request from ``fork``'s ``branch`` into ``base``'s main, opened by ``user``; GitHub
        mirrors its head into the base repository as ``refs/pull/N/head``, and so does this."""
        repo = self.repos[base]
        number = self._number(repo)
        pull = {"id": self.new_id(), "number": number, "title": title, "body": "", "state": "open", "draft": False,
                "user": self.user(user), "maintainer_can_modify": maintainer_can_modify,
                "head": {"ref": branch, "sha": self.branch_head(fork, branch),
                         "label": f"{fork.split('/')[0]}:{branch}", "repo": self._repo_json(fork)},
                "base": {"ref": "main", "repo": self._repo_json(base)},
                "html_url": f"{self.url}/{base}/pull/{number}", "pull_request": {}}
        repo.pulls[number] = pull
        repo.comments[number] = []
        self.mirror_pull_heads()
        return pull

    def mirror_pull_heads(self) -> None:
        """Each pull request's head, as ``refs/pull/N/head`` of its base repository."""
        for full_name, repo in list(self.repos.items()):
            for number, pull in list(repo.pulls.items()):
                source = pull["head"].get("repo", {}).get("full_name", full_name)
                head = self.branch_head(source, pull["head"]["ref"])
                if head is None:
                    continue
                if source != full_name:
                    _git(repo.bare, "fetch", "-q", str(self.repos[source].bare), f"+{head}:refs/pull/{number}/head")
                else:
                    _git(repo.bare, "update-ref", f"refs/pull/{number}/head", head)

    def _repo_json(self, full_name: str) -> dict[str, Any]:
        repo = self.repos[full_name]
        return {"full_name": full_name, "name": repo.name, "owner": self.user(repo.owner),
                "clone_url": self.clone_url(full_name), "fork": repo.fork_of is not None}

    def add_issue(self, full_name: str, title: str, body: str, *, labels: tuple[str, ...] = (),
                  user: str = "octo") -> dict[str, Any]:
        repo = self.repos[full_name]
        number = self._number(repo)
        issue = {"id": next(self._ids), "number": number, "title": title, "body": body, "state": "open",
                 "user": self.user(user), "labels": [{"name": label} for label in labels],
                 "html_url": f"{self.url}/{full_name}/issues/{number}", "pull_request": None}
        repo.issues[number] = issue
        repo.comments[number] = []
        return issue

    def add_comment(self, full_name: str, number: int, body: str, *, user: str = "octo") -> dict[str, Any]:
        repo = self.repos[full_name]
        comment = {"id": next(self._ids), "body": body, "user": self.user(user),
                   "html_url": f"{self.url}/{full_name}/issues/{number}#comment", "created_at": _now()}
        with self._lock:
            repo.comments.setdefault(number, []).append(comment)
        return comment

    def add_review_comment(self, full_name: str, number: int, body: str, *, path: str, line: int,
                           user: str = "octo", start_line: int | None = None, side: str = "RIGHT",
                           review_id: int | None = None) -> dict[str, Any]:
        """A line comment on lines ``start_line``..``line`` of ``side`` (RIGHT: the head, LEFT: the
        base), with the ``diff_hunk`` GitHub sends beside it: the pull request's hunk up to ``line``."""
        repo = self.repos[full_name]
        comment = {"id": next(self._ids), "body": body, "user": self.user(user), "path": path, "line": line,
                   "start_line": start_line, "side": side, "start_side": side if start_line else None,
                   "original_line": line, "original_start_line": start_line,
                   "diff_hunk": self.diff_hunk(full_name, number, path, line, side),
                   "pull_request_review_id": review_id or next(self._ids), "created_at": _now()}
        with self._lock:
            repo.review_comments.setdefault(number, []).append(comment)
        return comment

    def diff_hunk(self, full_name: str, number: int, path: str, line: int, side: str) -> str:
        """The hunk of pull request ``number``'s diff of ``path`` that holds ``line`` of ``side``, cut
        after that line, as GitHub's ``diff_hunk`` is ("" when the diff does not show the line)."""
        pulls = self.repos[full_name].pulls
        if number not in pulls:
            return ""
        self.mirror_pull_heads()
        ran = subprocess.run(["git", "diff", f"{pulls[number]['base']['ref']}...refs/pull/{number}/head", "--", path],
                             cwd=self.repos[full_name].bare, capture_output=True, text=True, env=_git_env())
        hunk: list[str] = []
        old = new = 0
        for text in ran.stdout.splitlines():
            if match := re.match(r"@@ -(\d+)(?:,\d+)? \+(\d+)", text):
                hunk, old, new = [text], int(match.group(1)), int(match.group(2))
                continue
            if not hunk or text.startswith("\\"):
                continue
            hunk.append(text)
            if (side == "LEFT" and text[:1] in " -" and old == line) or (side != "LEFT" and text[:1] in " +"
                                                                        and new == line):
                return "\n".join(hunk)
            old, new = old + (text[:1] in " -"), new + (text[:1] in " +")
        return ""

    def branch_head(self, full_name: str, branch: str) -> str | None:
        ran = subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}"],
                             cwd=self.repos[full_name].bare, capture_output=True, text=True, env=_git_env())
        return ran.stdout.strip() or None

    # ------------------------------------------------------------ webhooks

    def signature(self, body: bytes, secret: str | None = None) -> str:
        key = (self.webhook_secret if secret is None else secret).encode()
        return "sha256=" + hmac.new(key, body, hashlib.sha256).hexdigest()

    def deliver(self, target: str, event: str, payload: dict[str, Any], *, delivery: str | None = None,
                secret: str | None = None, headers: dict[str, str] | None = None) -> httpx.Response:
        """POST a webhook delivery to ``target`` as GitHub does."""
        body = json.dumps(payload).encode()
        sent = {"Content-Type": "application/json", "User-Agent": "GitHub-Hookshot/fake",
                "X-GitHub-Event": event, "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
                "X-Hub-Signature-256": self.signature(body, secret), **(headers or {})}
        return httpx.post(target, content=body, headers=sent, timeout=30)

    def echo(self, full_name: str, number: int, comment: dict[str, Any]) -> None:
        """The webhook of ``comment``, just written through the API, delivered before the API answers."""
        if self.echo_to is None:
            return
        payload = self.issue_payload(full_name, number, "created", comment=comment, sender=comment["user"]["login"])
        delivery = str(uuid.uuid4())
        for _ in range(2):  # GitHub redelivers, with the same id
            answer = self.deliver(self.echo_to, "issue_comment", payload, delivery=delivery)
            self.echoes.append((comment["body"], answer.status_code, answer.json()))

    def issue_payload(self, full_name: str, number: int, action: str, **extra: Any) -> dict[str, Any]:
        repo = self.repos[full_name]
        return {"action": action, "issue": repo.issues.get(number) or repo.pulls[number],
                "repository": {"full_name": full_name, "name": repo.name, "owner": {"login": repo.owner}},
                "sender": self.user(extra.pop("sender", repo.owner)), **extra}

    # ------------------------------------------------------------ internals

    def _number(self, repo: Repo) -> int:
        with self._lock:
            return max([0, *repo.issues, *repo.pulls]) + 1

    def new_id(self) -> int:
        return next(self._ids)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


# ------------------------------------------------------------------ the HTTP side

_ROUTES: list[tuple[str, re.Pattern[str], str]] = [
    (method, re.compile(f"^{API}{pattern}$"), name) for method, pattern, name in [
        ("GET", r"/user", "user"),
        ("GET", r"/search/issues", "search_issues"),
        ("GET", r"/repos/([^/]+)/([^/]+)", "get_repo"),
        ("GET", r"/repos/([^/]+)/([^/]+)/collaborators/([^/]+)/permission", "permission"),
        ("GET", r"/repos/([^/]+)/([^/]+)/issues/(\d+)", "get_issue"),
        ("GET", r"/repos/([^/]+)/([^/]+)/issues/(\d+)/comments", "list_comments"),
        ("POST", r"/repos/([^/]+)/([^/]+)/issues/(\d+)/comments", "create_comment"),
        ("POST", r"/repos/([^/]+)/([^/]+)/issues/(\d+)/reactions", "react_issue"),
        ("POST", r"/repos/([^/]+)/([^/]+)/issues/comments/(\d+)/reactions", "react_comment"),
        ("POST", r"/repos/([^/]+)/([^/]+)/pulls/comments/(\d+)/reactions", "react_review_comment"),
        ("GET", r"/repos/([^/]+)/([^/]+)/pulls", "list_pulls"),
        ("POST", r"/repos/([^/]+)/([^/]+)/pulls", "create_pull"),
        ("GET", r"/repos/([^/]+)/([^/]+)/pulls/(\d+)", "get_pull"),
        ("GET", r"/repos/([^/]+)/([^/]+)/pulls/(\d+)/comments", "list_review_comments"),
        ("POST", r"/repos/([^/]+)/([^/]+)/pulls/(\d+)/reviews", "create_review"),
        ("GET", r"/repos/([^/]+)/([^/]+)/pulls/(\d+)/reviews/(\d+)", "get_review"),
        ("POST", r"/repos/([^/]+)/([^/]+)/pulls/(\d+)/comments/(\d+)/replies", "reply_review_comment"),
        ("GET", r"/repos/([^/]+)/([^/]+)/commits/([^/]+)/check-runs", "check_runs"),
        ("GET", r"/repos/([^/]+)/([^/]+)/commits/([^/]+)/status", "combined_status"),
    ]]


def _handler(fake: FakeGitHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            self._dispatch("GET")

        def do_POST(self) -> None:
            self._dispatch("POST")

        def do_PATCH(self) -> None:
            self._dispatch("PATCH")

        def log_message(self, *args: Any) -> None:
            pass

        def _dispatch(self, method: str) -> None:
            url = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            if not url.path.startswith(API):
                self._git(method, url.path, url.query, raw)
                return
            body = json.loads(raw) if raw else None
            fake.requests.append(Seen(method, url.path, {k.lower(): v for k, v in self.headers.items()}, body))
            auth = self.headers.get("Authorization", "")
            if auth not in (f"token {fake.token}", f"Bearer {fake.token}"):
                self._json(401, {"message": "Bad credentials"})
                return
            if fake.fail_next:
                status, headers = fake.fail_next.pop(0)
                self._json(status, {"message": "API rate limit exceeded" if status in (403, 429) else "failure"},
                           headers)
                return
            for route_method, pattern, name in _ROUTES:
                match = pattern.match(url.path)
                if match and route_method == method:
                    with fake._lock:
                        status, answer, headers = getattr(self, f"_{name}")(*match.groups(), body=body,
                                                                           query=parse_qs(url.query))
                    if name == "create_comment" and status == 201:  # outside the lock: errand reads back
                        owner, repo_name, number = match.groups()
                        fake.echo(f"{owner}/{repo_name}", int(number), answer)
                    self._json(status, answer, headers)
                    return
            self._json(404, {"message": "Not Found"})

        def _json(self, status: int, answer: Any, headers: dict[str, str] | None = None) -> None:
            payload = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(payload)))
            self.send_header("Cache-Control", "private, max-age=60")  # as GitHub sends: a cache must not serve it
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(payload)

        # -- REST ---------------------------------------------------------

        def _repo(self, owner: str, name: str) -> Repo:
            return fake.repos[f"{owner}/{name}"]

        def _user(self, **_: Any) -> tuple[int, Any, dict[str, str]]:
            return 200, fake.user(ME), {"X-OAuth-Scopes": fake.scopes}

        def _search_issues(self, *, query: dict[str, list[str]], **_: Any) -> tuple[int, Any, dict[str, str]]:
            """GitHub's issue search, for the qualifiers errand sends: repo:, is:issue|open|closed, label:."""
            terms = query.get("q", [""])[0].split()
            repo = fake.repos[next(t[5:] for t in terms if t.startswith("repo:"))]
            found = list(repo.issues.values())
            for term in terms:
                key, _, value = term.partition(":")
                if key == "is" and value in ("open", "closed"):
                    found = [i for i in found if i["state"] == value]
                elif key == "label":
                    found = [i for i in found if value in [label["name"] for label in i["labels"]]]
            per_page = int(query.get("per_page", ["30"])[0])
            return 200, {"total_count": len(found), "incomplete_results": False, "items": found[:per_page]}, {}

        def _get_repo(self, owner: str, name: str, **_: Any) -> tuple[int, Any, dict[str, str]]:
            if f"{owner}/{name}" not in fake.repos:
                return 404, {"message": "Not Found"}, {}
            repo = self._repo(owner, name)
            mine = repo.fork_of is None  # the token's user holds the original, not someone's fork
            return 200, {"full_name": f"{owner}/{name}", "clone_url": fake.clone_url(f"{owner}/{name}"),
                         "default_branch": "main", "fork": not mine,
                         "permissions": {"admin": mine, "push": mine, "pull": True}}, {}

        def _permission(self, owner: str, name: str, user: str, **_: Any) -> tuple[int, Any, dict[str, str]]:
            return 200, {"permission": self._repo(owner, name).permissions.get(user, "read"),
                         "user": {"login": user}}, {}

        def _get_issue(self, owner: str, name: str, number: str, **_: Any) -> tuple[int, Any, dict[str, str]]:
            repo = self._repo(owner, name)
            issue = repo.issues.get(int(number)) or repo.pulls.get(int(number))
            return (200, issue, {}) if issue else (404, {"message": "Not Found"}, {})

        def _paged(self, items: list[Any], query: dict[str, list[str]]) -> tuple[int, Any, dict[str, str]]:
            per_page = int(query.get("per_page", ["30"])[0])
            page = int(query.get("page", ["1"])[0])
            chunk = items[(page - 1) * per_page: page * per_page]
            headers = {}
            if page * per_page < len(items):
                base = f"{fake.url}{urlsplit(self.path).path}"
                headers["Link"] = f'<{base}?per_page={per_page}&page={page + 1}>; rel="next"'
            return 200, chunk, headers

        def _list_comments(self, owner: str, name: str, number: str, *, query: dict[str, list[str]],
                           **_: Any) -> tuple[int, Any, dict[str, str]]:
            return self._paged(self._repo(owner, name).comments.get(int(number), []), query)

        def _create_comment(self, owner: str, name: str, number: str, *, body: Any,
                            **_: Any) -> tuple[int, Any, dict[str, str]]:
            return 201, fake.add_comment(f"{owner}/{name}", int(number), body["body"], user=ME), {}

        def _react(self, repo: Repo, target: str, body: Any) -> tuple[int, Any, dict[str, str]]:
            reaction = {"id": fake.new_id(), "content": body["content"], "target": target,
                        "user": {"login": ME}, "_t": time.monotonic()}  # for benchmarks/forge.py
            repo.reactions.append(reaction)
            return 201, reaction, {}

        def _react_issue(self, owner: str, name: str, number: str, *, body: Any,
                         **_: Any) -> tuple[int, Any, dict[str, str]]:
            return self._react(self._repo(owner, name), f"issue:{number}", body)

        def _react_comment(self, owner: str, name: str, comment: str, *, body: Any,
                           **_: Any) -> tuple[int, Any, dict[str, str]]:
            repo = self._repo(owner, name)
            if not any(c["id"] == int(comment) for thread in repo.comments.values() for c in thread):
                return 404, {"message": "Not Found"}, {}  # a line comment's id is not an issue comment's
            return self._react(repo, f"comment:{comment}", body)

        def _react_review_comment(self, owner: str, name: str, comment: str, *, body: Any,
                                  **_: Any) -> tuple[int, Any, dict[str, str]]:
            repo = self._repo(owner, name)
            if not any(c["id"] == int(comment) for thread in repo.review_comments.values() for c in thread):
                return 404, {"message": "Not Found"}, {}
            return self._react(repo, f"review_comment:{comment}", body)

        def _list_pulls(self, owner: str, name: str, *, query: dict[str, list[str]],
                        **_: Any) -> tuple[int, Any, dict[str, str]]:
            pulls = list(self._repo(owner, name).pulls.values())
            if "head" in query:
                pulls = [p for p in pulls if f"{owner}:{p['head']['ref']}" == query["head"][0]]
            state = query.get("state", ["open"])[0]
            if state != "all":
                pulls = [p for p in pulls if p["state"] == state]
            return self._paged(pulls, query)

        def _create_pull(self, owner: str, name: str, *, body: Any, **_: Any) -> tuple[int, Any, dict[str, str]]:
            full = f"{owner}/{name}"
            repo = self._repo(owner, name)
            head = fake.branch_head(full, body["head"])
            if head is None:
                return 422, {"message": "Validation Failed", "errors": [
                    {"resource": "PullRequest", "field": "head", "code": "invalid"}]}, {}
            if any(p["head"]["ref"] == body["head"] and p["state"] == "open" for p in repo.pulls.values()):
                return 422, {"message": "Validation Failed", "errors": [
                    {"resource": "PullRequest", "code": "custom",
                     "message": f"A pull request already exists for {owner}:{body['head']}."}]}, {}
            number = fake._number(repo)
            pull = {"id": fake.new_id(), "number": number, "title": body["title"], "body": body.get("body"),
                    "state": "open", "draft": bool(body.get("draft")), "user": {"login": ME},
                    "head": {"ref": body["head"], "sha": head, "repo": fake._repo_json(full)},
                    "base": {"ref": body["base"], "repo": fake._repo_json(full)}, "maintainer_can_modify": False,
                    "html_url": f"{fake.url}/{full}/pull/{number}", "pull_request": {}, "_t": time.monotonic()}
            repo.pulls[number] = pull
            repo.comments[number] = []
            return 201, pull, {}

        def _get_pull(self, owner: str, name: str, number: str, **_: Any) -> tuple[int, Any, dict[str, str]]:
            pull = self._repo(owner, name).pulls.get(int(number))
            if pull is not None:
                source = pull["head"].get("repo", {}).get("full_name", f"{owner}/{name}")
                pull["head"]["sha"] = fake.branch_head(source, pull["head"]["ref"])
            return (200, pull, {}) if pull else (404, {"message": "Not Found"}, {})

        def _list_review_comments(self, owner: str, name: str, number: str, *, query: dict[str, list[str]],
                                  **_: Any) -> tuple[int, Any, dict[str, str]]:
            return self._paged(self._repo(owner, name).review_comments.get(int(number), []), query)

        def _reply_review_comment(self, owner: str, name: str, number: str, comment: str, *, body: Any,
                                  **_: Any) -> tuple[int, Any, dict[str, str]]:
            reply = {"id": fake.new_id(), "body": body["body"], "user": {"login": ME},
                     "in_reply_to_id": int(comment)}
            self._repo(owner, name).review_comments.setdefault(int(number), []).append(reply)
            return 201, reply, {}

        def _create_review(self, owner: str, name: str, number: str, *, body: Any,
                           **_: Any) -> tuple[int, Any, dict[str, str]]:
            review = {"id": fake.new_id(), "user": fake.user(ME), "body": body.get("body"),
                      "state": {"APPROVE": "APPROVED", "REQUEST_CHANGES": "CHANGES_REQUESTED"}.get(
                          str(body.get("event")), "COMMENTED"), "event": body.get("event")}
            self._repo(owner, name).reviews.setdefault(int(number), []).append(review)
            return 200, review, {}

        def _get_review(self, owner: str, name: str, number: str, review: str,
                        **_: Any) -> tuple[int, Any, dict[str, str]]:
            found = next((r for r in self._repo(owner, name).reviews.get(int(number), []) if r["id"] == int(review)),
                         None)
            return (200, found, {}) if found else (404, {"message": "Not Found"}, {})

        def _check_runs(self, owner: str, name: str, ref: str, **_: Any) -> tuple[int, Any, dict[str, str]]:
            runs = self._repo(owner, name).check_runs.get(ref, [])
            return 200, {"total_count": len(runs), "check_runs": runs}, {}

        def _combined_status(self, owner: str, name: str, ref: str, **_: Any) -> tuple[int, Any, dict[str, str]]:
            statuses = self._repo(owner, name).statuses.get(ref, [])
            state = "pending" if not statuses else ("success" if all(s["state"] == "success" for s in statuses)
                                                    else "failure")
            return 200, {"state": state, "statuses": statuses, "sha": ref}, {}

        # -- git's smart HTTP, through the real git http-backend ----------

        def _git(self, method: str, path: str, query: str, raw: bytes) -> None:
            fake.requests.append(Seen(method, path, {k.lower(): v for k, v in self.headers.items()}, None))
            if basic_user(self.headers.get("Authorization", ""), fake.token) is not None:
                if self._refused_push(path, query):
                    self._json(403, {"message": "Permission to push to this fork denied"})
                    return
                if "git-upload-pack" in path + query:
                    with fake._lock:
                        fake.mirror_pull_heads()
            serve_git(self, fake.root, fake.token, method, path, query, raw)  # 401 without the token

        def _refused_push(self, path: str, query: str) -> bool:
            """A push to a fork is GitHub's to allow: only where one of its pull requests lets
            maintainers edit (``maintainer_can_modify``), as GitHub lets the base's writers."""
            if "git-receive-pack" not in path + query:
                return False
            full = path.strip("/").split(".git")[0]
            repo = fake.repos.get(full)
            if repo is None or repo.fork_of is None:
                return False
            pulls = fake.repos[repo.fork_of].pulls.values()
            return not any(p.get("maintainer_can_modify") and p["head"].get("repo", {}).get("full_name") == full
                           for p in pulls)

    return Handler

