"""A task's question asked on the forge, and the reply there answering it.

When a task from an issue (or a review round of a pull request) stops with a
question, the question is posted as a comment where the ask came from; a reply
there by the person who asked, or by anyone with write access, is the answer and
the same run resumes. Each question is posted once (the forge's table records which).
"""

from __future__ import annotations

from errand.forge.links import Link, LinkStore, PostedQuestion
from errand.forge.protocol import Forge
from errand.forge.refs import IssueRef
from errand.forge.text import visible
from errand.forge.timeline import QuestionPosted, note
from errand.tasks.lifecycle import TaskState
from errand.tasks.service import TaskService

__all__ = ["asked_on", "is_the_question", "post_question", "waiting_task"]


def post_question(service: TaskService, links: LinkStore, forge: Forge, link: Link) -> bool:
    """Post the question ``link``'s task waits on, unless it was posted already; whether one was."""
    if service.get_task(link.task_id).state is not TaskState.NEEDS_INPUT:
        return False
    question = service.open_question(link.task_id)
    posted = links.posted(link.task_id)
    if question is None or (posted is not None and posted.question == question[0]):
        return False
    number = link.pull or link.issue or asked_on(links, link)
    if number is None:
        return False
    who = f"@{link.requested_by} " if link.requested_by else ""
    text = visible(question[1]).replace("@", "@\u2060")  # quoted, pinging nobody
    where = IssueRef.of(link.repo, number, pull=link.pull is not None)
    said = forge.comment(where, f"{who}errand's task `{link.task_id}` has a question:\n\n"
                         + "\n".join(f"> {line}" for line in text.splitlines()) + "\n\nReply here to answer it.")
    # The comment's id: the forge's webhook tells errand of its own comment too, and that is no answer.
    posted = PostedQuestion(link.task_id, question[0], number, said.id)
    links.post(posted)
    note(service, link.task_id, QuestionPosted(posted))
    return True


def waiting_task(service: TaskService, links: LinkStore, repo: str, number: int, *,
                 pull: bool | None = None) -> Link | None:
    """The task linked to issue or pull request ``number`` that waits for an answer, if one does;
    ``pull`` says which the number is, where issues and pull requests are numbered apart (GitLab)."""
    candidates = links.for_issue(repo, number) if pull is not True else []
    newest = links.for_pull(repo, number) if pull is not False else None
    if newest is not None:
        candidates.append(newest)
    for link in reversed(candidates):
        if service.get_task(link.task_id).state is TaskState.NEEDS_INPUT:
            return link
    # A round for a fork's pull request errand may not push to has no pull request of its own yet:
    # it asked on the fork's (the waiting tasks are few, so looking at each is cheap).
    for task in service.list_tasks(state=TaskState.NEEDS_INPUT, limit=200):
        found = links.get(task.id)
        if found is not None and found.repo == repo and asked_on(links, found) == number:
            return found
    return None


def asked_on(links: LinkStore, link: Link) -> int | None:
    """The fork's pull request a round was asked for on, when it has no pull request or issue of its own."""
    if link.pull is not None or link.issue is not None:
        return None
    asked = links.round(link.task_id)
    return asked.fork_pull if asked is not None else None


def is_the_question(links: LinkStore, link: Link, comment_id: object) -> bool:
    """Whether ``comment_id`` is the comment errand posted to ask ``link``'s question."""
    posted = links.posted(link.task_id)
    return posted is not None and comment_id is not None and posted.comment_id == comment_id
