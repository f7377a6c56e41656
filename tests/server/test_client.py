"""The HTTP client and the local service answer one task API alike: the same calls on the same
store give the same records, the same events and the same errors, whichever side is asked.

A real ``errand serve`` (no engine, so tasks stay where the test puts them) over loopback,
and a :class:`TaskService` on the server's own database beside it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from errand.server.client import ErrandClient
from errand.tasks.api import TaskApi
from errand.tasks.errors import TaskNotFound, WrongState
from errand.tasks.lifecycle import TaskState
from errand.tasks.service import TaskService
from errand.tasks.store.tasks import TaskStore

from .conftest import Served

MODEL = "openai:wire-model"


@pytest.fixture
def both(serve: Callable[..., Served]) -> Iterator[tuple[TaskApi, TaskApi]]:
    served = serve("--no-engine")
    with TaskStore.open(served.database) as store, ErrandClient(served.url) as client:
        yield TaskService(store), client


@pytest.mark.parametrize("side", ["service", "client"])
def test_steering_a_task_reads_the_same_on_either_side(both: tuple[TaskApi, TaskApi], repo: Path, side: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-wire")
    asking, other = both if side == "service" else both[::-1]
    task = asking.submit("Make test_calc.py pass", repo=repo, model=MODEL, title="calc")
    assert other.get_task(task.id) == task
    assert task.id in [t.id for t in other.list_tasks(state="queued")]

    sent = asking.message(task.id, "prefer the standard library")
    with pytest.raises(WrongState) as refused:
        asking.answer(task.id, "nobody asked")
    assert (refused.value.task_id, refused.value.state) == (task.id, "queued")

    assert asking.cancel(task.id).state is TaskState.CANCELLED
    followed = [event.kind for event in other.follow(task.id, settled={TaskState.CANCELLED})]
    assert followed == ["message_sent", "cancelled"]
    assert [e.id for e in asking.events(task.id, kinds=["message_sent"])] == [sent]

    assert asking.retry(task.id).state is TaskState.QUEUED
    with pytest.raises(WrongState, match="has no result yet"):
        other.retry(task.id)
    assert asking.events(task.id) == other.events(task.id)
    assert asking.runs(task.id) == other.runs(task.id) == []
    assert asking.reviews(task.id) == other.reviews(task.id)


@pytest.mark.parametrize("side", [0, 1], ids=["service", "client"])
def test_a_missing_task_is_the_same_error_on_either_side(both: tuple[TaskApi, TaskApi], side: int) -> None:
    with pytest.raises(TaskNotFound) as missing:
        both[side].get_task("t-nosuch")
    assert missing.value.code == "task_not_found"
    with pytest.raises(TaskNotFound):
        both[side].cancel("t-nosuch")
