"""A loopback GitLab of the tests' own: the REST v4 endpoints errand uses, with state
(issues and their notes, award emoji, labels, merge requests, discussions with positions,
commit statuses and job logs), its projects served by the real ``git http-backend``.

As GitLab does it: ``PRIVATE-TOKEN`` (or ``Authorization: Bearer``); projects addressed by
their URL-encoded path; issues and merge requests numbered apart (``#1`` and ``!1``);
``per_page``/``page`` paging with ``X-Next-Page`` (and ``Link`` unless told not to); a
merge request from a branch the project lacks is a 422, a second open one from the same
branch a 409; drafts are ``Draft:`` titles; webhook deliveries carry ``X-Gitlab-Event``,
``X-Gitlab-Event-UUID`` and the secret itself as ``X-Gitlab-Token``.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import httpx

from .fakeforge import Answer, FakeForge, now, page_of

P, N = r"([^/]+)", r"(\d+)"
LEVELS = {"owner": 50, "maintainer": 40, "developer": 30, "reporter": 20, "guest": 10}


@dataclass
class Project:
    id: int
    path: str
    issues: dict[int, dict[str, Any]] = field(default_factory=dict)
    merge_requests: dict[int, dict[str, Any]] = field(default_factory=dict)
    discussions: dict[tuple[str, int], list[dict[str, Any]]] = field(default_factory=dict)  # (kind, iid) -> …
    awards: list[dict[str, Any]] = field(default_factory=list)
    members: dict[str, int] = field(default_factory=dict)  # username -> access level
    statuses: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # sha -> commit statuses
    traces: dict[int, str] = field(default_factory=dict)  # job id -> log

    def notes(self, kind: str, iid: int) -> list[dict[str, Any]]:
        return [note for d in self.discussions.get((kind, iid), []) for note in d["notes"]]


class FakeGitLab(FakeForge):
    api = "/api/v4"

    def __init__(self, root: Path, *, token: str, webhook_secret: str = "") -> None:
        self.projects: dict[str, Project] = {}
        self.users: dict[str, int] = {"errand-bot": 7}
        self.scopes = ["api"]
        self.send_links = True
        super().__init__(root, token=token, webhook_secret=webhook_secret)

    def authorized(self, headers: dict[str, str]) -> bool:
        return headers.get("private-token") == self.token or headers.get("authorization") == f"Bearer {self.token}"

    # ------------------------------------------------------------ state a test sets up

    def add_repo(self, path: str, source: Path) -> Project:
        self.add_bare(path, source)
        owner = path.split("/")[0]
        self.projects[path] = Project(self.new_id(), path, members={owner: LEVELS["owner"],
                                                                   "errand-bot": LEVELS["maintainer"]})
        self.user_id(owner)
        return self.projects[path]

    def user_id(self, username: str) -> int:
        return self.users.setdefault(username, self.new_id())

    def user(self, username: str) -> dict[str, Any]:
        return {"id": self.user_id(username), "username": username, "name": username.title()}

    def add_issue(self, path: str, title: str, body: str, *, labels: tuple[str, ...] = (),
                  user: str = "gitlabber") -> dict[str, Any]:
        project = self.projects[path]
        with self._lock:
            iid = max([0, *project.issues]) + 1
            issue = {"id": self.new_id(), "iid": iid, "project_id": project.id, "title": title, "description": body,
                     "state": "opened", "labels": list(labels), "author": self.user(user),
                     "web_url": f"{self.url}/{path}/-/issues/{iid}"}
            project.issues[iid] = issue
        return issue

    def add_note(self, path: str, kind: str, iid: int, body: str, *, user: str = "gitlabber",
                 position: dict[str, Any] | None = None, discussion: str | None = None) -> dict[str, Any]:
        """A note on issue (``kind`` "issues") or merge request ("merge_requests") ``iid``: a new
        discussion, or a reply in ``discussion``; ``position`` makes it a line comment."""
        project = self.projects[path]
        note = {"id": self.new_id(), "body": body, "author": self.user(user), "system": False, "created_at": now(),
                "type": "DiffNote" if position else None, "position": position, "resolvable": bool(position),
                "resolved": False, "noteable_type": "MergeRequest" if kind == "merge_requests" else "Issue"}
        with self._lock:
            threads = project.discussions.setdefault((kind, iid), [])
            found = next((d for d in threads if d["id"] == discussion), None)
            if found is None:
                found = {"id": uuid.uuid4().hex, "individual_note": position is None, "notes": []}
                threads.append(found)
            note["discussion_id"] = found["id"]
            if found["notes"]:
                note["position"] = note["position"] or found["notes"][0]["position"]
            found["notes"].append(note)
        return note

    def line_note(self, path: str, iid: int, body: str, *, file: str, line: int,
                  user: str = "gitlabber") -> dict[str, Any]:
        mr = self.projects[path].merge_requests[iid]
        position = {"position_type": "text", "base_sha": mr["diff_refs"]["base_sha"], "head_sha": mr["sha"],
                    "start_sha": mr["diff_refs"]["base_sha"], "new_path": file, "old_path": file, "new_line": line,
                    "old_line": None}
        return self.add_note(path, "merge_requests", iid, body, user=user, position=position)

    # ------------------------------------------------------------ webhooks

    def deliver(self, target: str, event: str, payload: dict[str, Any], *, token: str | None = None,
                delivery: str | None = None, headers: dict[str, str] | None = None) -> httpx.Response:
        """POST a webhook delivery to ``target`` as GitLab does (the secret as it is, in a header)."""
        sent = {"Content-Type": "application/json", "User-Agent": "GitLab/17.0.0", "X-Gitlab-Event": event,
                "X-Gitlab-Token": self.webhook_secret if token is None else token,
                "X-Gitlab-Event-UUID": delivery or str(uuid.uuid4()), "X-Gitlab-Webhook-UUID": "hook-1",
                "X-Gitlab-Instance": self.url, **(headers or {})}
        return httpx.post(target, content=json.dumps(payload).encode(), headers=sent, timeout=30)

    def _hook_project(self, path: str) -> dict[str, Any]:
        project = self.projects[path]
        return {"id": project.id, "path_with_namespace": path, "web_url": f"{self.url}/{path}"}

    def issue_hook(self, path: str, iid: int, *, added: tuple[str, ...], user: str | None = None) -> dict[str, Any]:
        """An ``Issue Hook`` for labels ``added`` to issue ``iid`` (its labels now include them)."""
        issue = self.projects[path].issues[iid]
        previous = [label for label in issue["labels"] if label not in added]
        issue["labels"] = [*previous, *added]
        return {"object_kind": "issue", "event_type": "issue", "user": self.user(user or path.split("/")[0]),
                "project": self._hook_project(path),
                "object_attributes": {"iid": iid, "title": issue["title"], "description": issue["description"],
                                      "action": "update", "url": issue["web_url"]},
                "labels": [{"title": label} for label in issue["labels"]],
                "changes": {"labels": {"previous": [{"title": label} for label in previous],
                                       "current": [{"title": label} for label in issue["labels"]]}}}

    def note_hook(self, path: str, kind: str, iid: int, note: dict[str, Any]) -> dict[str, Any]:
        project = self.projects[path]
        target = project.merge_requests[iid] if kind == "merge_requests" else project.issues[iid]
        return {"object_kind": "note", "event_type": "note", "user": note["author"],
                "project": self._hook_project(path),
                "object_attributes": {"id": note["id"], "note": note["body"], "noteable_type": note["noteable_type"],
                                      "discussion_id": note["discussion_id"], "type": note["type"],
                                      "position": note["position"]},
                ("merge_request" if kind == "merge_requests" else "issue"): target}

    # ------------------------------------------------------------ internals

    def _project(self, encoded: str) -> Project | None:
        return self.projects.get(unquote(encoded))

    def _paged(self, items: list[Any], query: dict[str, list[str]], path: str) -> Answer:
        return page_of(items, query, size="per_page", default=20, next_page_header=True,
                       link=f"{self.url}{path}" if self.send_links else None)

    # ------------------------------------------------------------ the REST side

    def routes(self) -> list[tuple[str, str, Callable[..., Answer]]]:
        kinds = r"(issues|merge_requests)"
        return [
            ("GET", r"/user", self._me),
            ("GET", r"/personal_access_tokens/self", self._token_self),
            ("GET", r"/users", self._users),
            ("GET", rf"/projects/{P}", self._get_project),
            ("GET", rf"/projects/{P}/members/all/{N}", self._member),
            ("GET", rf"/projects/{P}/issues", self._list_issues),
            ("GET", rf"/projects/{P}/{kinds}/{N}", self._get_one),
            ("GET", rf"/projects/{P}/{kinds}/{N}/notes", self._list_notes),
            ("POST", rf"/projects/{P}/{kinds}/{N}/notes", self._create_note),
            ("POST", rf"/projects/{P}/{kinds}/{N}/award_emoji", self._award),
            ("POST", rf"/projects/{P}/{kinds}/{N}/notes/{N}/award_emoji", self._award_note),
            ("GET", rf"/projects/{P}/merge_requests", self._list_mrs),
            ("POST", rf"/projects/{P}/merge_requests", self._create_mr),
            ("GET", rf"/projects/{P}/merge_requests/{N}/discussions", self._list_discussions),
            ("POST", rf"/projects/{P}/merge_requests/{N}/discussions/([0-9a-f]+)/notes", self._reply),
            ("GET", rf"/projects/{P}/repository/commits/([^/]+)/statuses", self._statuses),
            ("GET", rf"/projects/{P}/jobs/{N}/trace", self._trace),
        ]

    def _me(self, **_: Any) -> Answer:
        return 200, self.user("errand-bot"), {}

    def _token_self(self, **_: Any) -> Answer:
        return 200, {"id": 1, "name": "errand", "scopes": self.scopes, "active": True, "revoked": False}, {}

    def _users(self, *, query: dict[str, list[str]], **_: Any) -> Answer:
        name = query.get("username", [""])[0]
        return 200, [self.user(name)] if name in self.users else [], {}

    def _get_project(self, encoded: str, **_: Any) -> Answer:
        project = self._project(encoded)
        if project is None:
            return 404, {"message": "404 Project Not Found"}, {}
        level = project.members.get("errand-bot", 0)
        return 200, {"id": project.id, "path_with_namespace": project.path, "default_branch": "main",
                     "http_url_to_repo": self.clone_url(project.path), "web_url": f"{self.url}/{project.path}",
                     "permissions": {"project_access": {"access_level": level}, "group_access": None}}, {}

    def _member(self, encoded: str, user_id: str, **_: Any) -> Answer:
        project = self._project(encoded)
        name = next((n for n, i in self.users.items() if i == int(user_id)), None)
        if project is None or name not in project.members:
            return 404, {"message": "404 Not found"}, {}
        return 200, {**self.user(name), "access_level": project.members[name]}, {}

    def _list_issues(self, encoded: str, *, query: dict[str, list[str]], **_: Any) -> Answer:
        project = self._project(encoded)
        assert project is not None
        found = list(project.issues.values())
        state = query.get("state", ["all"])[0]
        if state != "all":
            found = [i for i in found if i["state"] == state]
        for label in query.get("labels", [""])[0].split(",") if query.get("labels") else []:
            found = [i for i in found if label in i["labels"]]
        if query.get("search"):
            found = [i for i in found if query["search"][0].lower() in (i["title"] + i["description"]).lower()]
        return self._paged(found, query, f"{self.api}/projects/{encoded}/issues")

    def _get_one(self, encoded: str, kind: str, iid: str, **_: Any) -> Answer:
        project = self._project(encoded)
        found = getattr(project, kind).get(int(iid)) if project else None
        if found is not None and kind == "merge_requests":
            found["sha"] = self.branch_head(project.path, found["source_branch"])  # type: ignore[union-attr]
        return (200, found, {}) if found else (404, {"message": "404 Not found"}, {})

    def _list_notes(self, encoded: str, kind: str, iid: str, *, query: dict[str, list[str]], **_: Any) -> Answer:
        project = self._project(encoded)
        assert project is not None
        notes = sorted(project.notes(kind, int(iid)), key=lambda n: n["id"])
        if query.get("sort", ["desc"])[0] == "desc":  # GitLab's default: newest first
            notes.reverse()
        return self._paged(notes, query, f"{self.api}/projects/{encoded}/{kind}/{iid}/notes")

    def _create_note(self, encoded: str, kind: str, iid: str, *, body: Any, **_: Any) -> Answer:
        project = self._project(encoded)
        assert project is not None
        if int(iid) not in getattr(project, kind):
            return 404, {"message": "404 Not found"}, {}
        return 201, self.add_note(project.path, kind, int(iid), body["body"], user="errand-bot"), {}

    def _award_on(self, project: Project | None, target: str, body: Any) -> Answer:
        assert project is not None
        if any(a["awardable"] == target and a["name"] == body["name"] for a in project.awards):
            return 404, {"message": "404 Award Emoji Name has already been taken"}, {}
        award = {"id": self.new_id(), "name": body["name"], "user": self.user("errand-bot"), "awardable": target,
                 "_t": time.monotonic()}
        project.awards.append(award)
        return 201, award, {}

    def _award(self, encoded: str, kind: str, iid: str, *, body: Any, **_: Any) -> Answer:
        return self._award_on(self._project(encoded), f"{kind}:{iid}", body)

    def _award_note(self, encoded: str, kind: str, iid: str, note: str, *, body: Any, **_: Any) -> Answer:
        return self._award_on(self._project(encoded), f"note:{note}", body)

    def _list_mrs(self, encoded: str, *, query: dict[str, list[str]], **_: Any) -> Answer:
        project = self._project(encoded)
        assert project is not None
        found = list(project.merge_requests.values())
        if query.get("source_branch"):
            found = [m for m in found if m["source_branch"] == query["source_branch"][0]]
        state = query.get("state", ["all"])[0]
        if state != "all":
            found = [m for m in found if m["state"] == state]
        return self._paged(found, query, f"{self.api}/projects/{encoded}/merge_requests")

    def _create_mr(self, encoded: str, *, body: Any, **_: Any) -> Answer:
        project = self._project(encoded)
        assert project is not None
        head = self.branch_head(project.path, body["source_branch"])
        base = self.branch_head(project.path, body["target_branch"])
        if head is None or base is None:
            return 422, {"message": [f"Source branch \"{body['source_branch']}\" does not exist"
                                     if head is None else "Target branch does not exist"]}, {}
        for mr in project.merge_requests.values():
            if mr["source_branch"] == body["source_branch"] and mr["state"] == "opened":
                return 409, {"message": [f"Another open merge request already exists for this source branch: "
                                         f"!{mr['iid']}"]}, {}
        iid = max([0, *project.merge_requests]) + 1
        mr = {"id": self.new_id(), "iid": iid, "project_id": project.id, "title": body["title"],
              "description": body.get("description"), "state": "opened", "source_branch": body["source_branch"],
              "target_branch": body["target_branch"], "source_project_id": project.id,
              "target_project_id": project.id, "sha": head, "draft": body["title"].startswith("Draft:"),
              "author": self.user("errand-bot"), "web_url": f"{self.url}/{project.path}/-/merge_requests/{iid}",
              "diff_refs": {"base_sha": base, "head_sha": head, "start_sha": base}, "_t": time.monotonic()}
        project.merge_requests[iid] = mr
        return 201, mr, {}

    def _list_discussions(self, encoded: str, iid: str, *, query: dict[str, list[str]], **_: Any) -> Answer:
        project = self._project(encoded)
        assert project is not None
        return self._paged(project.discussions.get(("merge_requests", int(iid)), []), query,
                           f"{self.api}/projects/{encoded}/merge_requests/{iid}/discussions")

    def _reply(self, encoded: str, iid: str, discussion: str, *, body: Any, **_: Any) -> Answer:
        project = self._project(encoded)
        assert project is not None
        if not any(d["id"] == discussion for d in project.discussions.get(("merge_requests", int(iid)), [])):
            return 404, {"message": "404 Discussion Not Found"}, {}
        return 201, self.add_note(project.path, "merge_requests", int(iid), body["body"], user="errand-bot",
                                  discussion=discussion), {}

    def _statuses(self, encoded: str, sha: str, *, query: dict[str, list[str]], **_: Any) -> Answer:
        project = self._project(encoded)
        assert project is not None
        return self._paged(project.statuses.get(sha, []), query,
                           f"{self.api}/projects/{encoded}/repository/commits/{sha}/statuses")

    def _trace(self, encoded: str, job: str, **_: Any) -> Answer:
        project = self._project(encoded)
        log = project.traces.get(int(job)) if project else None
        return (200, log.encode(), {}) if log is not None else (404, {"message": "404 Not found"}, {})
