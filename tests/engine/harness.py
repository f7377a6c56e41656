"""A sample project with a failing test, an engine running in the test's loop, and
model turns in each provider's wire format."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path
from typing import Any

from errand.agent import Budgets
from errand.models import Message, ScriptedModel, Tool, ToolCall
from errand.models.protocol import Reply
from errand.tasks.engines.local import LocalEngine, ModelFactory
from errand.tasks.lifecycle import TaskState
from errand.tasks.records import Event, Task
from errand.tasks.store.tasks import TaskStore
from polling import LAST, pauses

CALC = "def add(a, b):\n    return a - b\n\n\ndef double(x):\n    return x + x + 1\n"
TEST_CALC = ("from calc import add\n\nassert add(2, 3) == 5, f'add(2, 3) gave {add(2, 3)}'\n"
             "print('1 passed in 0.01s')\n")
ERRAND_TOML = '[test]\ncommand = "python3 test_calc.py"\n'

Turn = list[tuple[str, dict[str, Any]]]
READ = ("read_file", {"path": "calc.py"})
FIX = ("edit_file", {"path": "calc.py", "old": "return a - b", "new": "return a + b"})
TEST = ("shell", {"command": "python3 test_calc.py"})
FINISH = ("finish", {"summary": "add() subtracted; now it adds", "assumptions": []})
FIX_SCRIPT: list[Turn] = [[READ], [FIX], [TEST], [FINISH]]


def git(cwd: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_GLOBAL="/dev/null", GIT_CONFIG_NOSYSTEM="1")
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


def make_repo(root: Path, *, toml: str | None = ERRAND_TOML, files: dict[str, str] | None = None) -> Path:
    root.mkdir(parents=True)
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.name", "Test User")
    git(root, "config", "user.email", "user@example.com")
    contents = {"calc.py": CALC, "test_calc.py": TEST_CALC, **(files or {})}
    if toml is not None:
        contents["errand.toml"] = toml
    for name, text in contents.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "initial")
    return root


def worktree_state(repo: Path) -> dict[str, str]:
    """Every byte of the user's checkout (``.git`` included: HEAD, index, config), except refs
    and objects that accept is allowed to add."""
    state = {}
    for path in sorted(repo.rglob("*")):
        rel = path.relative_to(repo).as_posix()
        if path.is_file() and not rel.startswith((".git/objects/", ".git/refs/", ".git/logs/")):
            state[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return state


def turns(script: Iterable[Turn]) -> list[Message]:
    return [Message("assistant", "", [ToolCall(f"call_{n}_{i}", name, args) for i, (name, args) in enumerate(turn)])
            for n, turn in enumerate(script)]


def scripted(script: Iterable[Turn]) -> ScriptedModel:
    return ScriptedModel(turns(script))


def per_attempt(*scripts: list[Turn]) -> tuple[ModelFactory, list[ScriptedModel]]:
    models = [scripted(s) for s in scripts]
    return (lambda _spec, index: models[index]), models


class GatedModel:
    """A scripted model whose call number ``gate_at`` (1-based) waits until the test opens the gate."""

    def __init__(self, script: Iterable[Turn], gate_at: int) -> None:
        self.inner = scripted(script)
        self.name = "gated"
        self.gate_at = gate_at
        self.gate = asyncio.Event()
        self.waiting = asyncio.Event()

    @property
    def calls(self) -> list[tuple[list[Message], list[Tool]]]:
        return self.inner.calls

    async def complete(self, messages: list[Message], tools: list[Tool]) -> Reply:
        if len(self.inner.calls) + 1 == self.gate_at:
            self.waiting.set()
            await self.gate.wait()
        return await self.inner.complete(messages, tools)


def openai_turn(turn: Turn, n: int) -> dict[str, Any]:
    calls = [{"id": f"call_{n}_{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
             for i, (name, args) in enumerate(turn)]
    return {"id": f"chatcmpl-{n}", "object": "chat.completion", "created": 0, "model": "wire-model",
            "choices": [{"index": 0, "finish_reason": "tool_calls",
                         "message": {"role": "assistant", "content": None, "tool_calls": calls}}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}}


def anthropic_turn(turn: Turn, n: int) -> dict[str, Any]:
    content = [{"type": "tool_use", "id": f"toolu_{n}_{i}", "name": name, "input": args}
               for i, (name, args) in enumerate(turn)]
    return {"id": f"msg_{n}", "type": "message", "role": "assistant", "model": "wire-model", "content": content,
            "stop_reason": "tool_use", "stop_sequence": None, "usage": {"input_tokens": 100, "output_tokens": 20}}


@contextlib.asynccontextmanager
async def running_engine(store: TaskStore, models: ModelFactory | None = None, *, concurrency: int = 2,
                         budgets: Budgets | None = None, default_model: str = "scripted:unused",
                         isolation: str | None = None, kind: str = "local",
                         distiller: Callable[[Any], Any] | None = None) -> AsyncIterator[Any]:
    """An engine running tasks from ``store`` in this test's loop: the local engine, or (``kind``
    temporal) the Temporal dispatcher and one Temporal worker against the test's dev server.
    ``distiller`` gives the model that distils memories after a round."""
    if kind == "temporal":
        async with _temporal_engine(store, models, concurrency=concurrency, budgets=budgets,
                                    default_model=default_model, isolation=isolation, distiller=distiller) as worker:
            yield worker
        return
    options: dict[str, Any] = {"concurrency": concurrency, "poll_interval": 0.02, "budgets": budgets,
                               "default_model": default_model}
    if isolation is not None:
        options["isolation"] = isolation
    if models is not None:
        options["models"] = models
    if distiller is not None:
        options["distiller"] = distiller
    engine = LocalEngine(store, **options)
    stop = asyncio.Event()
    serving = asyncio.create_task(engine.serve(stop=stop))
    try:
        yield engine
    finally:
        stop.set()
        await asyncio.wait_for(serving, 60)


@contextlib.asynccontextmanager
async def _temporal_engine(store: TaskStore, models: ModelFactory | None, *, concurrency: int,
                           budgets: Budgets | None, default_model: str, isolation: str | None,
                           distiller: Callable[[Any], Any] | None) -> AsyncIterator[Any]:
    from errand.tasks.engines.temporal import TemporalSettings
    from errand.tasks.engines.temporal.dispatch import Dispatcher
    from errand.tasks.engines.temporal.worker import TemporalWorker

    settings = TemporalSettings.from_environment()
    worker = TemporalWorker(store, settings, concurrency=concurrency, budgets=budgets, isolation=isolation,
                            **({"models": models} if models is not None else {}))
    worker.bench.default_model = default_model
    if distiller is not None:
        worker.bench.distiller = distiller
    stop, ready = asyncio.Event(), asyncio.Event()
    # On PostgreSQL woken only by the database's word of a change: a change that sends none would
    # leave its test waiting, not pass unseen behind a fallback look.
    dispatcher = Dispatcher(store, settings, poll_interval=0.02, notified_poll=3600)
    serving = [asyncio.create_task(worker.serve(stop=stop, ready=ready.set)),
               asyncio.create_task(dispatcher.serve(stop=stop))]
    try:
        await asyncio.wait_for(ready.wait(), 60)
        yield worker
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*serving), 60)


async def wait_for_state(store: TaskStore, task_id: str, *states: TaskState, seconds: float = 120,
                         last: float = LAST) -> Task:
    deadline = time.monotonic() + seconds
    for pause in pauses(last=last):
        task = await asyncio.to_thread(store.get_task, task_id)
        if task.state in states:
            return task
        if time.monotonic() > deadline:
            kinds = [(e.kind, e.data) for e in store.events(task_id)][-8:]
            raise AssertionError(f"task {task_id} is {task.state}, not {states}; last events: {kinds}")
        await asyncio.sleep(pause)
    raise AssertionError("unreachable")  # pauses() never ends


async def wait_for_event(store: TaskStore, task_id: str, predicate: Callable[[Event], bool],
                         seconds: float = 120, last: float = LAST) -> Event:
    """The first event of the task that ``predicate`` takes. ``last``: the longest pause between two looks;
    a test that strikes (kills, stops) the moment it sees the event asks for a short one."""
    deadline = time.monotonic() + seconds
    for pause in pauses(last=last):
        for event in await asyncio.to_thread(store.events, task_id, 0, 100_000):
            if predicate(event):
                return event
        if time.monotonic() > deadline:
            raise AssertionError(f"no such event for task {task_id}")
        await asyncio.sleep(pause)
    raise AssertionError("unreachable")  # pauses() never ends
