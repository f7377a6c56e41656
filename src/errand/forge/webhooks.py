"""GitHub's webhook deliveries: verified, de-duplicated, and turned into tasks.

A delivery counts only when its ``X-Hub-Signature-256`` is the HMAC-SHA256 of the
raw body under the shared secret (compared in constant time); then only once per
``X-GitHub-Delivery`` id, since GitHub redelivers. What starts work:

* an issue labelled with the configured label (``errand``);
* a comment starting with the mention (``@errand <ask>``) on an issue;
* the mention in a comment, a review, or a line comment on a pull request errand
  opened: a follow-up round on that pull request's branch;
* the mention on any other pull request, a fork's too (see :mod:`errand.forge.forks`);
* ``@errand accept`` on an issue or pull request whose task is ready for review: the
  task is accepted in errand (and, by the ``pr`` policy, its pull request opens or its
  draft holds what was accepted); errand never approves or merges;
* a reply where a waiting task asked its question (see :mod:`errand.forge.questions`):
  the answer, and the same run resumes.

Only a person with write access (admin, maintain, write) starts anything: on a
public repository anyone may comment. errand reacts with 👀 on what it picked up
and comments with the task's link. A label on an issue whose task is still open
starts nothing more (Gitea says only that an issue's labels changed, not which).

The events are GitHub's; :mod:`errand.forge.receivers` says Gitea's and GitLab's in
them. Where a forge numbers merge requests apart from issues (GitLab),
``separate_numbers`` keeps a reply on issue #3 from answering merge request !3.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from errand.forge.errors import ForgeError
from errand.forge.forks import follow_foreign_pull
from errand.forge.intake import Ask, follow_pull, submit_issue
from errand.forge.links import Link, LinkStore
from errand.forge.protocol import Forge
from errand.forge.push import fetch_branch
from errand.forge.questions import is_the_question, waiting_task
from errand.forge.refs import IssueRef
from errand.forge.settings import ForgeSettings
from errand.forge.text import visible
from errand.tasks.lifecycle import FINAL, TaskState
from errand.tasks.records import Task
from errand.tasks.service import TaskService

__all__ = ["Outcome", "WebhookHandler", "verify_signature"]

WRITERS = frozenset({"admin", "maintain", "write"})
ACCEPT_WORDS = frozenset({"accept", "accept."})  # `@errand accept`: the one trigger that accepts on the forge


def verify_signature(secret: str, body: bytes, header: str | None) -> None:
    """Raise ``bad_signature`` unless ``header`` is ``sha256=`` + HMAC-SHA256(secret, body)."""
    expected = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    if not header or not hmac.compare_digest(expected, header.strip()):
        raise ForgeError("the delivery's signature does not match the webhook secret", code="bad_signature")


@dataclass(frozen=True)
class Outcome:
    action: str  # started | followed_up | answered | accepted | ignored | duplicate | pong
    detail: str
    task_id: str | None = None


class WebhookHandler:
    def __init__(self, service: TaskService, links: LinkStore, forge: Forge, settings: ForgeSettings, token: str,
                 *, public_url: str | None = None, separate_numbers: bool = False) -> None:
        self.service = service
        self.links = links
        self.forge = forge
        self.settings = settings
        self._token = token
        self.public_url = public_url.rstrip("/") if public_url else None
        self.separate_numbers = separate_numbers

    def handle(self, event: str, delivery: str, payload: dict[str, Any]) -> Outcome:
        if not self.links.first_delivery(delivery, event):
            return Outcome("duplicate", self.links.outcome(delivery) or "handled already")
        try:
            outcome = self._route(event, payload)
        except Exception as error:  # recorded, so a redelivery is not mistaken for a new request
            self.links.delivered(delivery, f"failed: {error}")
            raise
        self.links.delivered(delivery, f"{outcome.action}: {outcome.detail}")
        return outcome

    # ------------------------------------------------------------ routing

    def _route(self, event: str, payload: dict[str, Any]) -> Outcome:
        action = payload.get("action")
        repo = str((payload.get("repository") or {}).get("full_name") or "")
        if event == "ping":
            return Outcome("pong", "the webhook reaches errand")
        if event == "issues" and action == "labeled":
            if (payload.get("label") or {}).get("name") != self.settings.label:
                return Outcome("ignored", "another label")
            sender = payload.get("sender")
            return self._start(repo, payload["issue"], Ask(author=_login(sender), author_id=_user_id(sender)),
                               labelled=True)
        if event == "issue_comment" and action == "created":
            return self._comment(repo, payload["issue"], payload["comment"])
        if event == "pull_request_review_comment" and action == "created":
            return self._comment(repo, {**payload["pull_request"], "pull_request": {}}, payload["comment"],
                                 on_line=True)
        if event == "pull_request_review" and action == "submitted":
            review = payload["review"]
            return self._comment(repo, {**payload["pull_request"], "pull_request": {}}, review, review=True)
        return Outcome("ignored", f"{event}.{action} is not something errand acts on")

    def _comment(self, repo: str, issue: dict[str, Any], comment: dict[str, Any], *, review: bool = False,
                 on_line: bool = False) -> Outcome:
        body = str(comment.get("body") or "").strip()
        mention = self.settings.mention
        is_pull = issue.get("pull_request") is not None
        waiting = waiting_task(self.service, self.links, repo, int(issue["number"]),
                               pull=is_pull if self.separate_numbers else None)
        if waiting is not None and body:
            return self._answer(IssueRef.of(repo, int(issue["number"]), pull=is_pull), waiting, comment, body,
                                on_line=on_line)
        if not body.lower().startswith(mention.lower()):
            return Outcome("ignored", f"no {mention}")
        ask = Ask(author=_login(comment.get("user")), text=body[len(mention):].strip() or None,
                  comment_id=None if review else comment.get("id"), author_id=_user_id(comment.get("user")),
                  on_line=on_line)
        if (ask.text or "").strip().lower() in ACCEPT_WORDS:
            return self._accept(repo, int(issue["number"]), ask, pull=is_pull)
        if is_pull:
            return self._follow(repo, int(issue["number"]), ask)
        return self._start(repo, issue, ask)

    # ------------------------------------------------------------ what starts

    def _allowed(self, repo: str, login: str | None) -> bool:
        return bool(login) and self.forge.permission(repo, login or "") in WRITERS

    def _start(self, repo: str, issue: dict[str, Any], ask: Ask, *, labelled: bool = False) -> Outcome:
        if not self._allowed(repo, ask.author):
            return Outcome("ignored", f"@{ask.author} has no write access to {repo}")
        ref = IssueRef.of(repo, int(issue["number"]))
        if labelled:  # a label starts one task; a comment's ask may start another
            busy = next((link.task_id for link in self.links.for_issue(repo, ref.number)
                         if _open(self.service.store.get_task(link.task_id).state)), None)
            if busy is not None:
                return Outcome("ignored", f"task {busy} has {ref} already")
        where = self.settings.repo(repo)
        base = self._pinned(repo, where.path)
        task = submit_issue(self.service, self.links, self.forge, ref, repo=where.path, base=base, model=where.model,
                            ask=ask)
        self._picked_up(ref, ask, task)
        return Outcome("started", f"task {task.id} for {ref}", task.id)

    def _follow(self, repo: str, number: int, ask: Ask) -> Outcome:
        """A round on pull request ``number``: errand's own, or one a person opened (from a fork, too)."""
        if not self._allowed(repo, ask.author):
            return Outcome("ignored", f"@{ask.author} has no write access to {repo}")
        parent = self.links.for_pull(repo, number)
        comments = self.forge.review_comments(repo, number)
        if parent is not None:
            task = follow_pull(self.service, self.links, self.forge, self._token, parent, ask, comments)
        else:
            task = follow_foreign_pull(self.service, self.links, self.forge, self._token, self.settings.repo(repo),
                                       repo, self.forge.pull(repo, number), ask, comments)
        self._picked_up(IssueRef.of(repo, number, pull=True), ask, task)
        return Outcome("followed_up", f"task {task.id} for {repo}#{number}", task.id)

    def _accept(self, repo: str, number: int, ask: Ask, *, pull: bool) -> Outcome:
        """``@errand accept`` by a writer: every task of this issue or pull request that is ready for
        review is accepted in errand, as ``errand accept`` would. Nothing is merged: the pull request
        (a draft under ``pr = "draft-when-ready"``) stays the person's to mark ready and merge."""
        if not self._allowed(repo, ask.author):
            return Outcome("ignored", f"@{ask.author} has no write access to {repo}")
        linked = self.links.all_for_pull(repo, number) if pull else self.links.for_issue(repo, number)
        ready = [link for link in linked
                 if self.service.store.get_task(link.task_id).state is TaskState.READY_FOR_REVIEW]
        ref = IssueRef.of(repo, number, pull=pull)
        if not ready:
            self.forge.comment(ref, f"@{ask.author} nothing of errand's here waits for an accept.")
            return Outcome("ignored", f"nothing ready to accept on {ref}")
        for link in ready:
            self.service.accept(link.task_id)
            self.service.store.append_event(link.task_id, None, "forge_accepted", {"by": ask.author,
                                                                                   "comment_id": ask.comment_id})
        if ask.comment_id is not None:
            self.forge.react(ref, "+1", comment_id=ask.comment_id, on_line=ask.on_line)
        done = ", ".join(f"`{link.task_id}`" for link in ready)
        self.forge.comment(ref, f"Accepted in errand by @{ask.author}: task {done}. errand merges nothing: "
                                "marking the pull request ready and merging it are yours.")
        return Outcome("accepted", f"task {done} accepted by @{ask.author}", ready[0].task_id)

    def _answer(self, where: IssueRef, waiting: Link, comment: dict[str, Any], body: str, *,
                on_line: bool = False) -> Outcome:
        """A reply where a task asked: the answer, from the person who asked or a writer."""
        repo = where.repo
        if is_the_question(self.service, waiting, comment.get("id")):
            return Outcome("ignored", "errand's own question")
        author = _login(comment.get("user"))
        if author != waiting.requested_by and not self._allowed(repo, author):
            return Outcome("ignored", f"@{author} may not answer for {repo}")
        text = body[len(self.settings.mention):].strip() if body.lower().startswith(
            self.settings.mention.lower()) else body
        self.service.answer(waiting.task_id, visible(text) or text)
        if comment.get("id") is not None:
            self.forge.react(where, "+1", comment_id=comment["id"], on_line=on_line)
        return Outcome("answered", f"task {waiting.task_id} resumes", waiting.task_id)

    def _pinned(self, repo: str, clone: Path) -> str:
        """The default branch's head as the forge has it now: the commit the task starts from."""
        info = self.forge.repository(repo)
        head = fetch_branch(clone, info.clone_url, info.default_branch, self._token)
        if head is None:
            raise ForgeError(f"{repo} has no branch {info.default_branch}", code="forge_not_found")
        return head

    def _picked_up(self, ref: IssueRef, ask: Ask, task: Task) -> None:
        self.forge.react(ref, "eyes", comment_id=ask.comment_id, on_line=ask.on_line)
        link = f"{self.public_url}/tasks/{task.id}" if self.public_url else f"`errand show {task.id}`"
        self.forge.comment(ref, f"errand is on it: task `{task.id}` ({link}).")


def _user_id(user: object) -> int | None:
    found = user.get("id") if isinstance(user, dict) else None
    return found if isinstance(found, int) and not isinstance(found, bool) else None


def _open(state: TaskState) -> bool:
    """Still the issue's task: running, waiting, ready, or accepted (its pull request is the answer)."""
    return state not in FINAL or state is TaskState.ACCEPTED


def _login(user: object) -> str | None:
    return str(user.get("login")) if isinstance(user, dict) and user.get("login") else None
