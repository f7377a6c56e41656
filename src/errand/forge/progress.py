"""Where each task from the forge stands, in a person's words: the one view of a backlog batch
that ``errand forge ls`` prints and the web's forge page shows.

A stage is the task's state read with its pull request: ``queued``, ``running``, ``waiting``
(for a person's answer), ``ready`` (for review), ``draft`` (a draft pull request holds it,
under ``pr = "draft-when-ready"``), ``pr_opened``, ``accepted`` (no pull request yet),
``rejected``, ``failed``, ``cancelled``. CI is the last read of the checks on the commit
errand pushed: ``green``, ``red``, ``pending``, or nothing.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from errand.forge.links import Link
from errand.tasks.lifecycle import TaskState
from errand.tasks.records import Task
from errand.tasks.store import TaskStore

__all__ = ["LABELS", "Row", "counts", "rows"]

LABELS = {"queued": "queued", "running": "running", "waiting": "waiting for a person", "ready": "ready for review",
          "draft": "draft PR opened", "pr_opened": "PR opened", "accepted": "accepted", "rejected": "rejected",
          "answered": "answered", "failed": "failed", "cancelled": "cancelled"}
_RED = frozenset({"failure", "error", "timed_out", "action_required"})
_GREEN = frozenset({"success", "neutral", "skipped"})
_STATES = {TaskState.QUEUED: "queued", TaskState.PREPARING: "running", TaskState.RUNNING: "running",
           TaskState.NEEDS_INPUT: "waiting", TaskState.READY_FOR_REVIEW: "ready", TaskState.ACCEPTED: "accepted",
           TaskState.REJECTED: "rejected", TaskState.ANSWERED: "answered", TaskState.FAILED: "failed",
           TaskState.CANCELLED: "cancelled"}


@dataclass(frozen=True)
class Check:
    name: str
    state: str
    url: str | None


@dataclass(frozen=True)
class Row:
    link: Link
    task: Task
    stage: str
    issue_url: str | None
    ci: str  # green | red | pending | "" (nothing read yet)
    checks: tuple[Check, ...] = ()

    @property
    def label(self) -> str:
        return LABELS[self.stage]


def rows(store: TaskStore, links: list[Link]) -> list[Row]:
    return [_row(store, link) for link in links]


def counts(found: list[Row]) -> dict[str, int]:
    """How many tasks are at each stage, in the stages' order."""
    tally = Counter(row.stage for row in found)
    return {stage: tally[stage] for stage in LABELS if tally[stage]}


def _row(store: TaskStore, link: Link) -> Row:
    task = store.get_task(link.task_id)
    stage = _STATES[task.state]
    if link.pull is not None and task.state is TaskState.ACCEPTED:
        stage = "pr_opened"
    elif link.pull is not None and task.state is TaskState.READY_FOR_REVIEW and link.pushed is not None:
        stage = "draft"
    issue = store.last_event(task.id, ["forge_issue"])
    url = str(issue.data.get("url") or "") or None if issue is not None else None
    checks = _checks(store, task.id)
    return Row(link, task, stage, url, _ci(checks), checks)


def _checks(store: TaskStore, task_id: str) -> tuple[Check, ...]:
    event = store.last_event(task_id, ["forge_checks"])
    if event is None:
        return ()
    return tuple(Check(str(c.get("name")), str(c.get("state")), c.get("url")) for c in event.data.get("checks") or [])


def _ci(checks: tuple[Check, ...]) -> str:
    if not checks:
        return ""
    if any(check.state in _RED for check in checks):
        return "red"
    return "green" if all(check.state in _GREEN for check in checks) else "pending"
