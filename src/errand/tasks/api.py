"""The task API, as one protocol: what a face may ask of tasks, wherever they are kept.

:class:`~errand.tasks.service.TaskService` answers it over this machine's store;
:class:`~errand.server.client.ErrandClient` answers it over an ``errand serve``'s HTTP
API. The command line is written against this protocol, so one command works either way,
and mypy holds both to the same methods (see the check at the end of the client's module).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

from errand.tasks.comments import LineComment
from errand.tasks.evidence import Evidence
from errand.tasks.lifecycle import TaskState
from errand.tasks.records import Event, Review, Run, Task
from errand.tasks.service import Accepted
from errand.tasks.store.reading import ReadableStore

__all__ = ["TaskApi"]


class TaskApi(ReadableStore, Protocol):
    """Submit, steer, read and review tasks."""

    # ------------------------------------------------------------ intake and steering

    def submit(self, instruction: str, *, repo: str | Path, base: str = "HEAD", model: str | None = None,
               attempts: int = 1, title: str | None = None, agent: str | None = None) -> Task: ...

    def message(self, task_id: str, text: str) -> int: ...

    def answer(self, task_id: str, text: str) -> int: ...

    def cancel(self, task_id: str) -> Task: ...

    def retry(self, task_id: str) -> Task: ...

    def followup(self, task_id: str, text: str = "", comments: Sequence[LineComment] = (), *,
                 attempt: int | None = None) -> Review | Task: ...

    # ------------------------------------------------------------ review

    def reject(self, task_id: str, reason: str) -> Review: ...

    def accept(self, task_id: str, *, attempt: int | None = None, into: str | Path | None = None,
               confirm: bool = False) -> Accepted: ...

    def chosen_run(self, task_id: str, attempt: int | None = None) -> Run: ...

    def round_runs(self, task_id: str) -> list[Run]: ...

    def evidence(self, run: Run) -> Evidence | None: ...

    def progress(self, task_id: str) -> dict[str, Any]: ...

    # ------------------------------------------------------------ reading (and ReadableStore's)

    def follow(self, task_id: str, *, settled: Collection[TaskState], after: int = 0) -> Iterator[Event]:
        """The task's events after ``after``, as they come, until it is in a ``settled`` state."""
        ...
