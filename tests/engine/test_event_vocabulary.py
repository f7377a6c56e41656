"""Every event a real round writes is of a declared kind, with only the declared data fields."""

from __future__ import annotations

from pathlib import Path

from errand.tasks.events import KINDS
from errand.tasks.lifecycle import TaskState
from errand.tasks.service import TaskService
from errand.tasks.store.tasks import TaskStore

from .harness import FINISH, FIX, READ, TEST, per_attempt, running_engine, wait_for_state

S = TaskState


async def test_a_round_writes_only_declared_kinds_and_fields(store: TaskStore, service: TaskService, repo: Path,
                                                             script_file: Path) -> None:
    asking = [[READ], [("ask_user", {"question": "Strings too?"})], [("shell", {"command": "false"})],
              [FIX], [TEST], [FINISH]]
    models, _ = per_attempt(asking, [[READ], [FIX], [TEST], [FINISH]])
    task = service.submit("Make test_calc.py pass", repo=repo, model=f"scripted:{script_file}", attempts=2)
    async with running_engine(store, models):
        await wait_for_state(store, task.id, S.NEEDS_INPUT)
        service.message(task.id, "numbers only")
        service.answer(task.id, "No")
        await wait_for_state(store, task.id, S.READY_FOR_REVIEW, S.FAILED)
    service.reject(task.id, "not like this")
    written = store.events(task.id, limit=100_000)
    assert {"round_started", "question", "answer_delivered", "tool_result", "ranking", "rejected"} <= {
        e.kind for e in written}
    for event in written:
        kind = KINDS.get(event.kind)
        assert kind is not None, f"{event.kind} is not declared in errand.tasks.events"
        assert set(event.data) <= kind.fields, (event.kind, set(event.data) - kind.fields)
