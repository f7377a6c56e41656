"""GitHub's webhook deliveries: verified, de-duplicated, and turned into tasks.

A delivery counts only when its ``X-Hub-Signature-256`` is the HMAC-SHA256 of the
raw body under the shared secret (compared in constant time); then only once per
``X-GitHub-Delivery`` id, since GitHub redelivers. Decide, then act: the delivery is
read into a :class:`~errand.forge.inbound.events.ForgeEvent`, :func:`~errand.forge.inbound.decide.decide`
says what to do (its docstring is the decision table), and :meth:`WebhookHandler.act`
does it. Nothing the token's own account wrote is input; one review (its body and its
line comments, however many deliveries carry them) is at most one round. What starts work:

* an issue labelled with the configured label (``errand``);
* a comment starting with the mention (``@errand <ask>``) on an issue;
* the mention in a comment, a review, or a line comment on a pull request errand
  opened: a follow-up round on that pull request's branch;
* the mention on any other pull request, a fork's too (see :mod:`errand.forge.inbound.forks`);
* ``@errand accept`` on an issue or pull request whose task is ready for review: the
  task is accepted in errand (and, by the ``pr`` policy, its pull request opens or its
  draft holds what was accepted); errand never approves or merges;
* a reply where a waiting task asked its question (see :mod:`errand.forge.questions`):
  the answer, and the same run resumes; ``@errand accept`` there stays a command, and
  errand says the question is still open.

Only a person with write access (admin, maintain, write) starts anything: on a
public repository anyone may comment. errand reacts with 👀 on what it picked up
and comments with the task's link. A label on an issue whose task is still open
starts nothing more (Gitea says only that an issue's labels changed, not which).

The events are GitHub's; :mod:`errand.forge.inbound.receivers` says Gitea's and GitLab's in
them. Where a forge numbers merge requests apart from issues (GitLab),
``separate_numbers`` keeps a reply on issue #3 from answering merge request !3.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from errand.forge.errors import ForgeError
from errand.forge.inbound.decide import (
    Accept,
    Action,
    Answer,
    Duplicate,
    Follow,
    Ignore,
    Pong,
    State,
    could_act,
    decide,
    is_mine,
)
from errand.forge.inbound.events import ForgeEvent, normalise
from errand.forge.inbound.forks import follow_foreign_pull
from errand.forge.inbound.intake import Ask, follow_pull, submit_issue
from errand.forge.links import LinkStore
from errand.forge.outbound.push import fetch_branch
from errand.forge.protocol import Forge
from errand.forge.questions import is_the_question, waiting_task
from errand.forge.refs import IssueRef
from errand.forge.settings import ForgeSettings
from errand.forge.text import visible
from errand.forge.timeline import AcceptedOnForge, note
from errand.tasks.lifecycle import FINAL, TaskState
from errand.tasks.records import Task
from errand.tasks.service import TaskService

__all__ = ["Outcome", "WebhookHandler", "verify_signature"]

WRITERS = frozenset({"admin", "maintain", "write"})


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
    """Decide, then act: each delivery is recorded once by its id, read into a
    :class:`~errand.forge.inbound.events.ForgeEvent`, decided by :func:`~errand.forge.inbound.decide.decide`
    over what :meth:`observe` reads, and performed by :meth:`act`, the one place that acts."""

    def __init__(self, service: TaskService, links: LinkStore, forge: Forge, settings: ForgeSettings, token: str,
                 *, public_url: str | None = None, separate_numbers: bool = False) -> None:
        self.service = service
        self.links = links
        self.forge = forge
        self.settings = settings
        self._token = token
        self.public_url = public_url.rstrip("/") if public_url else None
        self.separate_numbers = separate_numbers
        self._me: str | None = None

    def handle(self, event: str, delivery: str, payload: dict[str, Any]) -> Outcome:
        said = normalise(event, delivery, payload)  # a shape the forge does not send is refused before it counts
        if not self.links.first_delivery(delivery, event):
            return Outcome("duplicate", self.links.outcome(delivery) or "handled already")
        try:
            outcome = self.act(said, decide(said, self.observe(said)))
        except Exception as error:  # recorded, so a redelivery is not mistaken for a new request
            self.links.delivered(delivery, f"failed: {error}")
            raise
        self.links.delivered(delivery, f"{outcome.action}: {outcome.detail}")
        return outcome

    def me(self) -> str:
        """The login errand's token acts as, asked of the forge once: what errand writes is never input."""
        if self._me is None:
            found = self.forge.me()
            if not found:  # errand could not tell its own writing from a person's: it acts on neither
                raise ForgeError(f"{self.forge.name} did not say which account the token acts as",
                                 code="forge_auth")
            self._me = found
        return self._me

    # ------------------------------------------------------------ what errand knows

    def observe(self, event: ForgeEvent) -> State:
        """The :class:`State` :func:`decide` needs for ``event``, read from the store and the forge."""
        state = State(me=self.me() if event.kind not in ("ping", "other") else "", mention=self.settings.mention,
                      label=self.settings.label, review_done=self._review_done(event))
        if event.number is None or event.kind in ("ping", "other") or is_mine(event, state):
            return state
        if event.kind == "labeled" or not event.pull:  # one open task per issue, however it was asked for
            had = self.links.for_issue(event.repo, event.number)
            busy = next((link.task_id for link in had if _open(self.service.get_task(link.task_id).state)),
                        None)
            state = replace(state, busy_task=busy, first_task=not had)
        if event.kind != "labeled":
            waiting = waiting_task(self.service, self.links, event.repo, event.number,
                                   pull=event.pull if self.separate_numbers else None)
            if waiting is not None:
                state = replace(state, waiting_task=waiting.task_id, asked_by=waiting.requested_by,
                                is_question=is_the_question(self.links, waiting, event.comment_id))
        if could_act(event, state):
            state = replace(state, may_write=bool(event.author) and self.forge.permission(
                event.repo, event.author or "") in WRITERS)
        if state.may_write and event.kind == "line_comment" and event.review_id is not None and not (
                state.review_done or state.waiting_task):
            state = replace(state, review_body=self._review_body(event.repo, event.number, event.review_id))
        return state

    def _review_body(self, repo: str, number: int, review_id: int) -> str:
        """The review's body, or "" when the forge no longer has it: the line comment still asks."""
        try:
            return self.forge.review_body(repo, number, review_id)
        except ForgeError as error:
            if error.code != "forge_not_found":
                raise
            return ""

    def _review_done(self, event: ForgeEvent) -> bool:
        return event.review_id is not None and self.links.outcome(
            self._claim_key(event, "review", event.review_id)) is not None

    def _claim_key(self, event: ForgeEvent, what: str, id_: int) -> str:
        """The claim a review's round or a comment's action is recorded under (beside the
        deliveries: one table of "done once")."""
        where = hashlib.sha256(f"{self.forge.base_url} {event.repo}".encode()).hexdigest()[:24]
        return f"{what}:{where}:{id_}"

    # ------------------------------------------------------------ the one place that acts

    def act(self, event: ForgeEvent, action: Action) -> Outcome:
        if isinstance(action, Pong):
            return Outcome("pong", "the webhook reaches errand")
        if isinstance(action, Ignore):
            return Outcome("ignored", action.reason)
        if isinstance(action, Duplicate):
            return Outcome("duplicate", action.reason)
        if event.review_id is not None and not self._claim(event, "review", event.review_id):
            return Outcome("duplicate", f"review {event.review_id} was acted on already")
        # One comment, one action, under however many delivery ids (a repository's hook and its
        # organisation's, or `connect` run twice) it arrives.
        if event.comment_id is not None and not self._claim(event, event.kind, event.comment_id):
            return Outcome("duplicate", f"comment {event.comment_id} was acted on already")
        assert event.number is not None
        ask = Ask(author=event.author, text=getattr(action, "text", None), comment_id=event.comment_id,
                  author_id=event.author_id, on_line=event.on_line)
        if isinstance(action, Answer):
            return self._answer(event, action)
        if isinstance(action, Accept):
            return self._accept(event.repo, event.number, ask, pull=event.pull, still_open=action.still_open)
        if isinstance(action, Follow):
            return self._follow(event.repo, event.number, ask)
        return self._start(event.repo, event.number, ask)

    def _claim(self, event: ForgeEvent, what: str, id_: int) -> bool:
        """Atomically: the first delivery of a comment, or part of a review, to act wins; any other,
        delivered at the same moment or later and in any order, is the same instruction."""
        key = self._claim_key(event, what, id_)
        if not self.links.first_delivery(key, what):
            return False
        self.links.delivered(key, f"by delivery {event.delivery}")
        return True

    def _start(self, repo: str, number: int, ask: Ask) -> Outcome:
        ref = IssueRef.of(repo, number)
        where = self.settings.repo(repo)
        base = self._pinned(repo, where.path)
        task = submit_issue(self.service, self.links, self.forge, ref, repo=where.path, base=base, model=where.model,
                            ask=ask)
        self._picked_up(ref, ask, task)
        return Outcome("started", f"task {task.id} for {ref}", task.id)

    def _follow(self, repo: str, number: int, ask: Ask) -> Outcome:
        """A round on pull request ``number``: errand's own, or one a person opened (from a fork, too)."""
        parent = self.links.for_pull(repo, number)
        comments = self.forge.review_comments(repo, number)
        if parent is not None:
            task = follow_pull(self.service, self.links, self.forge, self._token, parent, ask, comments)
        else:
            task = follow_foreign_pull(self.service, self.links, self.forge, self._token, self.settings.repo(repo),
                                       repo, self.forge.pull(repo, number), ask, comments)
        self._picked_up(IssueRef.of(repo, number, pull=True), ask, task)
        return Outcome("followed_up", f"task {task.id} for {repo}#{number}", task.id)

    def _accept(self, repo: str, number: int, ask: Ask, *, pull: bool, still_open: str | None) -> Outcome:
        """``@errand accept`` by a writer: every task of this issue or pull request that is ready for
        review is accepted in errand, as ``errand accept`` would. Nothing is merged: the pull request
        (a draft under ``pr = "draft-when-ready"``) stays the person's to mark ready and merge."""
        linked = self.links.all_for_pull(repo, number) if pull else self.links.for_issue(repo, number)
        ready = [link for link in linked
                 if self.service.get_task(link.task_id).state is TaskState.READY_FOR_REVIEW]
        ref = IssueRef.of(repo, number, pull=pull)
        waits = (f"\n\nTask `{still_open}`'s question is still open: reply here without "
                 f"`{self.settings.mention} accept` to answer it.") if still_open else ""
        if not ready:
            self.forge.comment(ref, f"@{ask.author} nothing of errand's here waits for an accept.{waits}")
            return Outcome("ignored", f"nothing ready to accept on {ref}" + (
                f"; task {still_open}'s question is still open" if still_open else ""))
        for link in ready:
            # The person's own `accept` on the forge, under the evidence the pull request shows: their confirm.
            self.service.accept(link.task_id, confirm=True)
            note(self.service, link.task_id, AcceptedOnForge(ask.author, ask.comment_id))
        if ask.comment_id is not None:
            self.forge.react(ref, "+1", comment_id=ask.comment_id, on_line=ask.on_line)
        done = ", ".join(f"`{link.task_id}`" for link in ready)
        self.forge.comment(ref, f"Accepted in errand by @{ask.author}: task {done}. errand merges nothing: "
                                f"marking the pull request ready and merging it are yours.{waits}")
        return Outcome("accepted", f"task {done} accepted by @{ask.author}", ready[0].task_id)

    def _answer(self, event: ForgeEvent, action: Answer) -> Outcome:
        """A reply where a task asked: the answer, and the same run resumes."""
        assert event.number is not None
        self.service.answer(action.task_id, visible(action.text) or action.text)
        if event.comment_id is not None:
            self.forge.react(IssueRef.of(event.repo, event.number, pull=event.pull), "+1",
                             comment_id=event.comment_id, on_line=event.on_line)
        return Outcome("answered", f"task {action.task_id} resumes", action.task_id)

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


def _open(state: TaskState) -> bool:
    """Still the issue's task: running, waiting, ready, or accepted (its pull request is the answer)."""
    return state not in FINAL or state is TaskState.ACCEPTED
