"""Project memory across tasks: what the first task teaches, the second is given, with its
sources, and a person sees it on the task."""

from __future__ import annotations

import json
import os
from pathlib import Path

import forkserver
from errand.memory import MemoryStore
from errand.tasks.lifecycle import TaskState
from errand.tasks.service import TaskService
from errand.tasks.store.tasks import TaskStore
from postgres import on_sqlite_only

from .harness import FINISH, FIX, FIX_SCRIPT, make_repo, running_engine, scripted, wait_for_state

AGENTS = "# Agents\n\nKeep calc.py free of third-party imports.\n"


@on_sqlite_only("store")  # the store plays no part in project memory across tasks
async def test_the_first_task_teaches_and_the_second_is_given_it_with_provenance(
        store: TaskStore, tmp_path: Path, script_file: Path) -> None:
    repo = make_repo(tmp_path / "project", files={"AGENTS.md": AGENTS})
    service = TaskService(store)
    first = service.submit("Make test_calc.py pass", repo=repo, model=f"scripted:{script_file}")
    teacher = scripted(FIX_SCRIPT)
    async with running_engine(store, lambda _s, _i: teacher):
        await wait_for_state(store, first.id, TaskState.READY_FOR_REVIEW)
    service.reject(first.id, "Do not change the public signature of add; callers rely on it.")

    second = service.submit("Fix add() so 2 + 3 is 5", repo=repo, model=f"scripted:{script_file}")
    learner = scripted([[("recall", {"query": "how are tests run"})], [FIX], [FINISH]])
    async with running_engine(store, lambda _s, _i: learner):
        await wait_for_state(store, second.id, TaskState.READY_FOR_REVIEW)

    system = learner.calls[0][0][0].content
    memories = system[system.index("<memories>"):system.index("</memories>")]
    assert "python3 test_calc.py" in memories and f"task {first.id}" in memories  # the command that worked
    assert "Do not change the public signature of add" in memories and "review" in memories
    # AGENTS.md is in the prompt whole: its passages are not given a second time as memories.
    assert "Keep calc.py free of third-party imports." in system[:system.index("<memories>")]
    assert "Keep calc.py free of third-party imports." not in memories and "AGENTS.md @" not in memories
    recall_answer = next(m.content for m in learner.calls[1][0] if m.role == "tool")
    assert "python3 test_calc.py" in recall_answer

    [given] = store.events(second.id, kinds=["memories_given"])
    uses = MemoryStore(store.engine, embedder=None).uses(second.id)
    assert {memory.id for memory, how in uses if how == "given"} == set(given.data["ids"])
    assert {how for _, how in uses} >= {"given", "recalled"}

    # The person sees them on the task.
    env = {**os.environ, "ERRAND_DATABASE_URL": str(store.engine.url), "COLUMNS": "200"}
    shown = forkserver.run(["show", second.id], env=env, check=True).stdout
    assert "memories given" in shown and "Do not change the public signature" in shown
    assert f"review of {first.id}" in shown or first.id in shown
    shown_json = json.loads(forkserver.run(["show", second.id, "--json"], env=env, check=True).stdout)
    assert {m["id"] for m in shown_json["memories"]} >= set(given.data["ids"])


@on_sqlite_only("store")  # the store plays no part in project memory across tasks
async def test_a_finished_task_is_distilled_into_proposed_memories(
        store: TaskStore, service: TaskService, repo: Path, script_file: Path) -> None:
    from errand.models import Message, ScriptedModel, ToolCall

    from .harness import per_attempt

    distiller = ScriptedModel([Message("assistant", "", [
        ToolCall("p1", "propose_memory", {"kind": "command", "text": "Run the tests with python3 test_calc.py"}),
        ToolCall("p2", "propose_memory", {"kind": "fact", "text": "token = ghp_" + "a1B2" * 9})])])
    factory, _ = per_attempt(FIX_SCRIPT)
    task = service.submit("Make test_calc.py pass", repo=repo, model=f"scripted:{script_file}")
    async with running_engine(store, factory) as engine:
        engine.bench.distiller = lambda _spec: distiller
        await wait_for_state(store, task.id, TaskState.READY_FOR_REVIEW)
        while not store.events(task.id, kinds=["memories_proposed"]):
            await __import__("asyncio").sleep(0.02)
    [proposed] = store.events(task.id, kinds=["memories_proposed"])
    assert proposed.data["refused"] == 1  # the secret never reaches the store
    memories = MemoryStore(store.engine, embedder=None)
    [memory] = [memories.get(i) for i in proposed.data["ids"]]
    assert memory.status.value == "proposed" and "python3 test_calc.py" in memory.text
    assert "the trajectory" not in memory.text
    trajectory = distiller.calls[0][0]
    assert "Make test_calc.py pass" in str(trajectory)


def test_the_task_query_is_its_title_and_opening_words() -> None:
    from dataclasses import replace

    from errand.tasks.round.memory_link import QUERY_WORDS, task_query

    store_task = TaskStore.open("sqlite://").create_task(title="Fix add", instruction="Fix add. " + "word " * 500,
                                                         repo="/r")
    query = task_query(store_task)
    assert query.startswith("Fix add") and len(query.split()) == QUERY_WORDS
    assert task_query(replace(store_task, title="Rounding")).startswith("Rounding\nFix add.")
