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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from errand.forge.links import Link
from errand.forge.timeline import Check, last_checks, last_issue
from errand.tasks.lifecycle import TaskState
from errand.tasks.records import Event, Task

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


class Reads(Protocol):
    """What a row is read from: the task service, or the task store beneath it."""

    def get_task(self, task_id: str) -> Task: ...

    def last_event(self, task_id: str, kinds: Sequence[str]) -> Event | None: ...


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


def rows(store: Reads, links: list[Link]) -> list[Row]:
    return [_row(store, link) for link in links]


def counts(found: list[Row]) -> dict[str, int]:
    """How many tasks are at each stage, in the stages' order."""
    tally = Counter(row.stage for row in found)
    return {stage: tally[stage] for stage in LABELS if tally[stage]}


def _row(store: Reads, link: Link) -> Row:
    task = store.get_task(link.task_id)
    stage = _STATES[task.state]
    if link.pull is not None and task.state is TaskState.ACCEPTED:
        stage = "pr_opened"
    elif link.pull is not None and task.state is TaskState.READY_FOR_REVIEW and link.pushed is not None:
        stage = "draft"
    issue = last_issue(store, task.id)
    read = last_checks(store, task.id)
    checks = read.checks if read is not None else ()
    return Row(link, task, stage, issue.url or None if issue is not None else None, _ci(checks), checks)


def _ci(checks: tuple[Check, ...]) -> str:
    if not checks:
        return ""
    if any(check.state in _RED for check in checks):
        return "red"
    return "green" if all(check.state in _GREEN for check in checks) else "pending"
