"""The task store's value objects: immutable snapshots of rows."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from errand.models.endpoint import ModelEndpoint
from errand.tasks.lifecycle import TaskState

__all__ = ["Event", "Recovery", "Review", "Run", "RunResult", "RunState", "Task", "Verdict"]


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
    # The agent kind chosen at submission (errand.agent.seam's); None: errand's own.
    agent: str | None = field(default=None, kw_only=True)


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

    @property
    def outcome(self) -> RunResult | None:
        """The ranked result of a run that reached the end of its round (None: it did not —
        still running, interrupted, cancelled, or failed before the round was ranked)."""
        return RunResult.from_json(self.result) if RunResult.stored(self.result) else None


@dataclass(frozen=True)
class RunResult:
    """What a run that reached the end of its round left: how the agent ended, its place in
    the round's ranking, its patch, its evidence (as :meth:`Evidence.to_json` wrote it), what
    it spent and the caches the round used. Stored as JSON in the run's row, unchanged in
    shape from the dict the engines wrote before this type existed."""

    status: str
    detail: str | None
    rank: int
    patch: str = ""
    summary: str | None = None
    assumptions: list[str] = field(default_factory=list)
    budget: str | None = None
    evidence: dict[str, Any] = field(default_factory=dict)
    spent: dict[str, Any] = field(default_factory=dict)
    caches: dict[str, Any] = field(default_factory=dict)

    @staticmethod
    def stored(data: Any) -> bool:
        """Whether a run's stored ``result`` is a ranked result (failed rounds store a reason)."""
        return isinstance(data, Mapping) and "rank" in data

    @property
    def changed(self) -> bool:
        return bool(self.evidence.get("files"))

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "detail": self.detail, "summary": self.summary,
                "assumptions": list(self.assumptions), "budget": self.budget, "rank": self.rank,
                "patch": self.patch, "evidence": self.evidence, "spent": self.spent, "caches": self.caches}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunResult:
        return cls(status=str(data.get("status", "")), detail=data.get("detail"), rank=int(data["rank"]),
                   patch=str(data.get("patch") or ""), summary=data.get("summary"),
                   assumptions=list(data.get("assumptions") or []), budget=data.get("budget"),
                   evidence=dict(data.get("evidence") or {}), spent=dict(data.get("spent") or {}),
                   caches=dict(data.get("caches") or {}))


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
