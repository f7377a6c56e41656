#!/usr/bin/env python3
"""Record the Temporal workflow histories that ``tests/engine/test_replay.py`` replays.

    .venv/bin/python tests/engine/histories/record.py NAME

Runs a few task stories with this checkout's errand — a fix, a question answered, best of
two, a cancel — against a throw-away Temporal dev server, one Temporal worker and a SQLite
store, and writes each story's workflow history to ``NAME-<story>.json`` beside this file.
Record once for each shape of the workflow that running workflows may have begun under:
the test replays every history here on today's workflow code, so a change that would break a
workflow begun under an older errand fails there, not in a team's upgrade.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE.parents[2] / "src")]  # tests/ (engine.harness, temporal), src/

from engine.harness import (  # noqa: E402
    FINISH,
    FIX,
    FIX_SCRIPT,
    READ,
    TEST,
    make_repo,
    per_attempt,
    running_engine,
    scripted,
    wait_for_event,
    wait_for_state,
)
from errand.tasks.lifecycle import TaskState  # noqa: E402
from errand.tasks.service import TaskService  # noqa: E402
from errand.tasks.store.tasks import TaskStore  # noqa: E402
from temporal import TemporalServer  # noqa: E402

Ended = Callable[[str], Awaitable[None]]  # until the task's workflow has ended (its worker still up)
Story = Callable[[TaskStore, TaskService, Path, Ended], Awaitable[str]]
_SCRIPT = ""  # a task's model, a scripted one; the engine's factory gives each attempt its script


async def fixed(store: TaskStore, service: TaskService, repo: Path, ended: Ended) -> str:
    task = service.submit("Make test_calc.py pass", repo=repo, model=_SCRIPT)
    async with running_engine(store, lambda _s, _i: scripted(FIX_SCRIPT), kind="temporal"):
        await wait_for_state(store, task.id, TaskState.READY_FOR_REVIEW)
        await ended(task.id)
    return task.id


async def asked(store: TaskStore, service: TaskService, repo: Path, ended: Ended) -> str:
    model = scripted([[READ], [("ask_user", {"question": "Strings too?"})], [FIX], [TEST], [FINISH]])
    task = service.submit("Make test_calc.py pass", repo=repo, model=_SCRIPT)
    async with running_engine(store, lambda _s, _i: model, kind="temporal"):
        await wait_for_state(store, task.id, TaskState.NEEDS_INPUT)
        service.answer(task.id, "Numbers only")
        await wait_for_state(store, task.id, TaskState.READY_FOR_REVIEW)
        await ended(task.id)
    return task.id


async def best_of_two(store: TaskStore, service: TaskService, repo: Path, ended: Ended) -> str:
    factory, _models = per_attempt([[FIX], [FINISH]], [[FIX], [TEST], [FINISH]])
    task = service.submit("Make test_calc.py pass", repo=repo, model=_SCRIPT, attempts=2)
    async with running_engine(store, factory, kind="temporal"):
        await wait_for_state(store, task.id, TaskState.READY_FOR_REVIEW)
        await ended(task.id)
    return task.id


async def cancelled(store: TaskStore, service: TaskService, repo: Path, ended: Ended) -> str:
    model = scripted([[("shell", {"command": "sleep 600"})], [FINISH]])
    task = service.submit("Make test_calc.py pass", repo=repo, model=_SCRIPT)
    async with running_engine(store, lambda _s, _i: model, kind="temporal"):
        await wait_for_event(store, task.id, lambda e: e.kind == "tool_call")
        service.cancel(task.id)
        await wait_for_state(store, task.id, TaskState.CANCELLED)
        await ended(task.id)
    return task.id


STORIES: dict[str, Story] = {"fixed": fixed, "asked": asked, "best-of-two": best_of_two, "cancelled": cancelled}


async def record(name: str, server: TemporalServer, work: Path) -> None:
    from temporalio.client import Client

    from errand.tasks.engines.temporal import TemporalSettings

    global _SCRIPT
    (work / "script.json").write_text("[]")
    _SCRIPT = f"scripted:{work / 'script.json'}"
    client = await Client.connect(server.address)

    def handle(task_id: str) -> Any:
        return client.get_workflow_handle(TemporalSettings.from_environment().workflow_id(task_id))

    async def ended(task_id: str) -> None:
        await asyncio.wait_for(handle(task_id).result(), 120)

    for story, run in STORIES.items():
        with TaskStore.open(f"sqlite:///{work / f'{story}.db'}") as store:
            task_id = await run(store, TaskService(store, memory=None), make_repo(work / story), ended)
        history = await handle(task_id).fetch_history()
        path = HERE / f"{name}-{story}.json"
        path.write_text(json.dumps(json.loads(history.to_json()), indent=1) + "\n")
        print(f"{path.name}: {len(history.events)} events", flush=True)


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a stopped recording removes its server too
    work = Path(tempfile.mkdtemp(prefix="errand-record-"))
    os.environ.update({"ERRAND_HOME": str(work / "home"), "ERRAND_TEMPORAL_QUEUE": "errand-record"})
    server = TemporalServer()
    server.start()
    os.environ["ERRAND_TEMPORAL"] = server.address
    try:
        asyncio.run(record(sys.argv[1], server, work))
    finally:
        server.remove()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
