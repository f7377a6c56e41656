"""The reading half of the task API, answered by whatever store a face holds.

:class:`~errand.tasks.store.tasks.TaskStore` reads this machine's database and
:class:`~errand.server.client.RemoteStore` reads a server's over HTTP; both are a
:class:`ReadableStore`. :class:`StoreReads` gives the service and the client their
reading methods from their ``store``, written once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Generic, Protocol, TypeVar

from errand.tasks.evidence import Evidence
from errand.tasks.lifecycle import TaskState
from errand.tasks.records import Event, Review, Run, Task

__all__ = ["ReadableStore", "StoreReads"]


class ReadableStore(Protocol):
    """What a store offers for reading tasks."""

    def get_task(self, task_id: str) -> Task: ...

    def list_tasks(self, *, state: TaskState | str | None = None, repo: str | None = None, limit: int = 50,
                   before: str | None = None) -> list[Task]: ...

    def runs(self, task_id: str) -> list[Run]: ...

    def reviews(self, task_id: str) -> list[Review]: ...

    def events(self, task_id: str, after_id: int = 0, limit: int = 1000, *,
               kinds: Sequence[str] | None = None) -> list[Event]: ...


S = TypeVar("S", bound=ReadableStore)


class StoreReads(Generic[S]):
    """Reading a task, its runs, reviews and events: what ``self.store`` says."""

    store: S

    def get_task(self, task_id: str) -> Task:
        return self.store.get_task(task_id)

    def list_tasks(self, *, state: TaskState | str | None = None, repo: str | None = None, limit: int = 50,
                   before: str | None = None) -> list[Task]:
        return self.store.list_tasks(state=state, repo=repo, limit=limit, before=before)

    def runs(self, task_id: str) -> list[Run]:
        return self.store.runs(task_id)

    def reviews(self, task_id: str) -> list[Review]:
        return self.store.reviews(task_id)

    def events(self, task_id: str, after_id: int = 0, limit: int = 1000, *,
               kinds: Sequence[str] | None = None) -> list[Event]:
        return self.store.events(task_id, after_id, limit, kinds=kinds)

    def evidence(self, run: Run) -> Evidence | None:
        """The evidence of a run that reached the end of its round; None for any other."""
        outcome = run.outcome
        return Evidence.from_json(outcome.evidence) if outcome and outcome.evidence else None
