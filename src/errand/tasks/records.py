"""The task store's value objects: immutable snapshots of rows."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from errand.models.endpoint import ModelEndpoint
from errand.tasks.lifecycle import TaskState

__all__ = ["Event", "Recovery", "Review", "Run", "RunState", "Task", "Verdict"]


class RunState(enum.StrEnum):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"  # its worker died mid-run; set only by recovery


class Verdict(enum.StrEnum):
    ACCEPTED = "accepted"
    REJECTED = "rejected"
    FOLLOWUP = "followup"


@dataclass(frozen=True)
class Task:
    id: str
    title: str
    instruction: str
    repo: str
    base_ref: str
    base_commit: str | None
    model: str | None  # the spec as given: a named model or provider:model
    # What it resolved to where the task was submitted, endpoint included; every worker uses
    # exactly this. None for tasks from before 0004, which a worker resolves itself (and says so).
    model_endpoint: ModelEndpoint | None
    attempts: int
    state: TaskState
    branch: str | None
    parent_id: str | None
    created_at: float
    updated_at: float


@dataclass(frozen=True)
class Run:
    id: str
    task_id: str
    attempt: int
    round: int
    state: RunState
    worker: str
    started_at: float
    ended_at: float | None
    result: Any

    @property
    def interrupted(self) -> bool:
        return self.state is RunState.INTERRUPTED


@dataclass(frozen=True)
class Event:
    id: int
    task_id: str
    run_id: str | None
    seq: int | None
    time: float
    kind: str
    data: Any


@dataclass(frozen=True)
class Review:
    id: int
    task_id: str
    run_id: str | None
    verdict: Verdict
    reason: str | None
    time: float


@dataclass(frozen=True)
class Recovery:
    """What :meth:`TaskStore.recover_interrupted` did about one run left running."""

    run_id: str | None  # None: an active task whose worker died before it started a run
    task_id: str
    previous: TaskState
    state: TaskState  # the task's state afterwards; equal to ``previous`` if the task was not active
