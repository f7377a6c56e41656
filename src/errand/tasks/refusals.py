"""Why a person's action does not fit the state a task is in, and what to do instead.

The lifecycle's own sentence ("a task cannot move from accepted to rejected")
is right but says nothing a person can act on. Each refusal here names the
state in the person's words and the command that does what they likely meant.
"""

from __future__ import annotations

from errand.tasks.errors import WrongState
from errand.tasks.lifecycle import ACTIVE, TaskState
from errand.tasks.records import Task

__all__ = ["landed", "refused"]

S = TaskState


def landed(commit: str | None, branch: str | None) -> str:
    """Where an accepted task's work is: ``commit abc123 on branch errand/…``."""
    return f"commit {(commit or '?')[:12]} on branch {branch}"


def refused(task: Task, action: str, *, commit: str | None = None) -> WrongState:
    """The error for ``action`` (accept, reject, cancel, followup, retry) on ``task`` in its
    present state; ``commit`` is an accepted task's commit."""
    said = f"task {task.id} {_is(task, commit)}; {_instead(task, action)}"
    return WrongState(said, task_id=task.id, state=task.state.value)


def _is(task: Task, commit: str | None) -> str:
    if task.state is S.QUEUED:
        return "is queued and has no result yet"
    if task.state in ACTIVE:
        return f"is still running ({task.state.value.replace('_', ' ')})"
    return {S.READY_FOR_REVIEW: "is ready for review", S.ACCEPTED: f"was accepted ({landed(commit, task.branch)})",
            S.REJECTED: "was rejected", S.ANSWERED: "was answered (it changed nothing)", S.FAILED: "failed",
            S.CANCELLED: "was cancelled"}[task.state]


def _instead(task: Task, action: str) -> str:
    tid, state = task.id, task.state
    if state is S.QUEUED or state in ACTIVE:
        if action in ("followup", "retry"):
            return f"send the agent a message with `errand message {tid} \"...\"` (it reads it at its next step)"
        return f"follow it with `errand logs -f {tid}`, or stop it with `errand cancel {tid}`"
    if state is S.ACCEPTED:
        if action == "accept":
            return f"`git switch {task.branch}` takes you to it"
        return (f"its work has landed, so it cannot be {_done(action)}: delete the branch to take it back "
                f"(`git branch -D {task.branch}`), or `errand followup {tid} \"...\"` starts a new task from it")
    if state is S.ANSWERED:
        if action == "cancel":
            return "nothing of it runs any more"
        return (f"it answered with a report and changed nothing, so there is no diff to {action}: `errand show "
                f"{tid}` has the report, and `errand followup {tid} \"...\"` asks for more (or for the change)")
    if state in (S.FAILED, S.CANCELLED):
        if action == "cancel":
            return "nothing of it runs any more"
        return (f"it has no result to review: `errand retry {tid}` runs it again from where it started, "
                f"`errand followup {tid} \"...\"` does that with more instructions")
    if action == "retry":
        return (f"it has a result: `errand followup {tid} \"...\"` asks for more work on it, "
                f"`errand show {tid}` shows it")
    if state is S.REJECTED:
        if action == "cancel":
            return "nothing of it runs any more"
        return f"`errand followup {tid} \"...\"` asks for another round"
    return f"review it with `errand show {tid}` and `errand diff {tid}`"


def _done(action: str) -> str:
    return {"reject": "rejected", "cancel": "cancelled", "retry": "retried"}.get(action, action)
