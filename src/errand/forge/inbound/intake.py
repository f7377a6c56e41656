"""A task from an issue, or from a comment on a pull request errand opened.

The issue's text becomes the instruction (see :mod:`errand.forge.text`); the
task is linked to the issue so its pull request says "Fixes #N". A follow-up on
a pull request starts from the head of the pull request's branch as the forge
has it now, so a person's commits pushed there are built on, never overwritten.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from errand.forge.links import Link, LinkStore, Round
from errand.forge.outbound.attribution import credit_asker
from errand.forge.outbound.push import fetch_branch, fetch_ref
from errand.forge.protocol import Forge
from errand.forge.records import ReviewComment
from errand.forge.refs import IssueRef
from errand.forge.text import issue_instruction, visible
from errand.forge.timeline import FollowupAsked, IssueTaken, note
from errand.repo.errors import RepoError
from errand.repo.git import run_git
from errand.tasks.comments import LineComment, Side, quote_hunk, quote_text
from errand.tasks.lifecycle import FINAL, TaskState
from errand.tasks.records import Task
from errand.tasks.round.prompt import commented_instruction
from errand.tasks.service import TaskService

__all__ = ["Ask", "Batch", "follow_pull", "followup_instruction", "head_reader", "short", "submit_batch",
           "submit_issue"]

_TITLE = 60


@dataclass(frozen=True)
class Ask:
    """Who asked for the work and how: a comment's id and text, or a label (no comment)."""

    author: str | None = None
    text: str | None = None
    comment_id: int | None = None
    author_id: int | None = None  # the forge's numeric id of ``author`` (its commit credit's address)
    on_line: bool = False  # the comment is a line comment of a pull request's diff


def submit_issue(service: TaskService, links: LinkStore, forge: Forge, ref: IssueRef, *, repo: str | Path,
                 base: str = "HEAD", model: str | None = None, attempts: int = 1, ask: Ask | None = None,
                 batch: str | None = None) -> Task:
    """Queue a task that resolves ``ref``, read in full (title, body, labels, the whole thread)."""
    ask = ask or Ask()
    issue = forge.issue(ref)
    instruction = issue_instruction(ref, issue, ask=ask.text)
    title = f"{short(visible(issue.title))} (#{ref.number})"
    task = service.submit(instruction, repo=repo, base=base, model=model, attempts=attempts, title=title)
    links.add(Link(task.id, forge.name, forge.base_url, ref.repo, issue=ref.number, requested_by=ask.author,
                   comment_id=ask.comment_id, batch=batch))
    note(service, task.id, IssueTaken(str(ref), issue.url, ask.author))
    # Who asked is credited: the person whose label or comment started it, else the issue's author.
    if ask.author:
        credit_asker(service, forge, task.id, ask.author, ask.author_id)
    else:
        credit_asker(service, forge, task.id, issue.author, issue.author_id)
    return task


@dataclass(frozen=True)
class Batch:
    """One backlog query's tasks: the ones it started and the issues it left, with why."""

    id: str
    started: list[tuple[IssueRef, Task]] = field(default_factory=list)
    skipped: list[tuple[IssueRef, str]] = field(default_factory=list)


def submit_batch(service: TaskService, links: LinkStore, forge: Forge, repo: str, query: str, *, clone: str | Path,
                 limit: int, base: str = "HEAD", model: str | None = None, attempts: int = 1) -> Batch:
    """A task for each issue ``query`` finds, at most ``limit``; an issue whose task is still
    open (not rejected, failed or cancelled) is left, so running the batch again adds only new ones."""
    batch = Batch(f"b-{secrets.token_hex(4)}")
    for issue in forge.search_issues(repo, query, limit):
        ref = IssueRef.of(repo, issue.number)
        open_task = next((link.task_id for link in links.for_issue(repo, issue.number)
                          if _open(service.get_task(link.task_id).state)), None)
        if open_task is not None:
            batch.skipped.append((ref, f"task {open_task} has it"))
            continue
        task = submit_issue(service, links, forge, ref, repo=clone, base=base, model=model, attempts=attempts,
                            batch=batch.id)
        batch.started.append((ref, task))
    return batch


def _open(state: TaskState) -> bool:
    return state not in FINAL or state is TaskState.ACCEPTED


def follow_pull(service: TaskService, links: LinkStore, forge: Forge, token: str, parent: Link, ask: Ask,
                line_comments: list[ReviewComment], *, ci: bool = False) -> Task:
    """A new task continuing ``parent``'s pull request: from its branch's current head, with the
    ask and every line comment (file and line) in its instruction; its work is pushed there."""
    assert parent.pull is not None and parent.pull_branch is not None
    task = service.get_task(parent.task_id)
    clone = Path(task.repo)
    url = forge.repository(parent.repo).clone_url
    earlier = links.round(parent.task_id)
    fork = earlier.push_repo or "" if earlier is not None else ""
    if fork and fork != parent.repo:
        # A fork's branch is read as the base repository mirrors it: the token goes to no fork to fetch.
        head = fetch_ref(clone, url, f"refs/pull/{parent.pull}/head", token)
    else:
        head = fetch_branch(clone, url, parent.pull_branch, token)
    head = head or task.base_commit or task.base_ref
    instruction = followup_instruction(parent.repo, parent.pull, parent.pull_branch, ask, line_comments,
                                       head_reader(clone, head))
    new = service.submit(instruction, repo=clone, base=head, model=task.model, attempts=1,
                         title=f"Follow-up on #{parent.pull}: {short(visible(ask.text or 'review comments'))}",
                         parent_id=task.id)
    links.add(Link(new.id, forge.name, forge.base_url, parent.repo, issue=parent.issue, requested_by=ask.author,
                   comment_id=ask.comment_id, pull=parent.pull, pull_url=parent.pull_url,
                   pull_branch=parent.pull_branch))
    credit_asker(service, forge, new.id, ask.author, ask.author_id)
    threads = tuple(c.id for c in line_comments if c.in_reply_to is None and visible(c.body))
    asked = links.add_round(Round(new.id, parent.pull, parent.pull_branch, head, ask.author, threads, ci=ci,
                                  push_repo=fork or None))
    note(service, new.id, FollowupAsked(asked))
    return new


def followup_instruction(repo: str, pull: int, branch: str, ask: Ask, line_comments: list[ReviewComment],
                         read_head: Callable[[str], str | None]) -> str:
    """The round's instruction: the ask, and each line comment that opens a thread anchored as a
    follow-up's comments are (:func:`errand.tasks.round.prompt.commented_instruction`), its lines quoted
    from the forge's diff hunk, else from the head the round starts from."""
    parts = [f"Review feedback on pull request #{pull} of {repo} (branch {branch}); "
             "your working copy starts from that branch's current head."]
    if ask.text:
        parts.append(f"@{ask.author} asked: {visible(ask.text)}" if ask.author else visible(ask.text))
    threads = [_anchored(c, read_head) for c in line_comments if c.in_reply_to is None and visible(c.body)]
    return commented_instruction("\n\n".join(parts), threads)


def _anchored(comment: ReviewComment, read_head: Callable[[str], str | None]) -> LineComment:
    end = comment.line or 0  # 0: on the file as a whole
    start = min(comment.start_line or end, end)
    side: Side = "old" if comment.side == "old" else "new"
    quoted = quote_hunk(comment.diff_hunk, side, start, end) if comment.diff_hunk and end else ()
    if not quoted and end and side == "new" and (text := read_head(comment.path)) is not None:
        quoted = quote_text(text, start, end)
    return LineComment(comment.path, start, end, visible(comment.body), side, comment.author or None, quoted)


def head_reader(clone: Path, head: str) -> Callable[[str], str | None]:
    """A path's text at ``head`` in ``clone`` (``None`` if that commit has no such file)."""
    def read(path: str) -> str | None:
        try:
            return run_git(["cat-file", "blob", f"{head}:{path}"], clone)
        except RepoError:
            return None
    return read


def short(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= _TITLE else line[:_TITLE - 1].rstrip() + "…"
