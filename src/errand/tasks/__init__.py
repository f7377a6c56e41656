"""errand.tasks: what a task is and how it runs.

The values sit at this package's root (records, the lifecycle, the log's events and
their wording, evidence, progress, errors), with the service people act through and
the one task API every face is written against. Three subpackages hold the rest:
:mod:`errand.tasks.store` (the tables and the store), :mod:`errand.tasks.round` (a
round, written once for every engine) and :mod:`errand.tasks.engines` (what runs
rounds). The names below are the package's face; each is imported when first asked
for, so ``import errand.tasks.records`` does not pay for the service and the store.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from errand._lazy import face

if TYPE_CHECKING:
    from errand.tasks.api import TaskApi
    from errand.tasks.comments import LineComment, Side
    from errand.tasks.errors import NeedsConfirmation, TaskError, TaskNotFound
    from errand.tasks.evidence import Evidence, TestRun
    from errand.tasks.lifecycle import ACTIVE, FINAL, TaskState
    from errand.tasks.records import Event, Review, Run, RunState, Task, Verdict
    from errand.tasks.round.environment import Environment
    from errand.tasks.service import TaskService
    from errand.tasks.store.tasks import TaskStore

_HOMES = {
    "TaskApi": "api", "LineComment": "comments", "Side": "comments", "NeedsConfirmation": "errors",
    "TaskError": "errors", "TaskNotFound": "errors", "Evidence": "evidence", "TestRun": "evidence",
    "ACTIVE": "lifecycle", "FINAL": "lifecycle", "TaskState": "lifecycle", "Event": "records",
    "Review": "records", "Run": "records", "RunState": "records", "Task": "records", "Verdict": "records",
    "Environment": "round.environment", "TaskService": "service", "TaskStore": "store.tasks",
}

__all__ = [
    "ACTIVE", "FINAL", "Environment", "Event", "Evidence", "LineComment", "NeedsConfirmation", "Review", "Run",
    "RunState", "Side", "Task", "TaskApi", "TaskError", "TaskNotFound", "TaskService", "TaskState", "TaskStore",
    "TestRun", "Verdict",
]


if not TYPE_CHECKING:  # a type checker sees the names above, and no catch-all
    __getattr__ = face(__name__, _HOMES)
