"""Where tasks meet project memory: what a task is given, what its agent recalls and
proposes, and what errand learns from how the task went.

* **Given** — when a round starts, the project's instruction files (read from the
  pristine checkout of the base commit, never from what an agent wrote) are synced
  into memory, and the memories that best answer the task are put in the agent's
  context with their ids and sources; the task records which (``memories_given``).
  Instruction files the prompt already holds whole are not given again as memories;
  pitfalls and reviewers' preferences keep places of their own; a manual rule is
  given when the task names it (``@name``).
* **Surfaced** — when the agent opens or edits a file, the rules scoped to it
  (``globs`` rules, a folder's AGENTS.md) and the memories that cite it are added to
  the tool's result, once per attempt (``memories_surfaced``).
* **Recalled / proposed** — the agent's ``recall`` and ``remember`` tools. What it
  proposes waits for a person's approval.
* **Observed** — the setup, test and lint commands as they actually ran, and
  people's reviews: rejection reasons and follow-up instructions.

Memory is help, never a gate: if it fails, the task goes on without it and says so.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection
from pathlib import Path
from typing import Any

from errand.memory import (
    MemoryStore,
    MemoryStoreError,
    Provenance,
    Recalled,
    distill,
    observe_command,
    observe_followup,
    observe_review,
    project_key,
    retrieve,
    sync_instructions,
)
from errand.memory.observe import CommandKind
from errand.memory.selection import FileScope, Withheld, named_rules, select, withheld_ids
from errand.models import Message, Model
from errand.tasks.evidence import Evidence
from errand.tasks.records import Task
from errand.tasks.round.environment import Environment

__all__ = ["GIVEN", "RECALLED", "SURFACED", "AttemptMemory", "TaskMemory", "observe_verdict", "task_query"]

log = logging.getLogger("errand.memory")
GIVEN = 8  # memories put in the agent's context when a round starts
RECALLED = 5  # memories a recall answers with
SURFACED = 6  # rules and memories shown at most when the agent opens one file (the rest at the next)
# The dense query encoder costs ~2 ms a token on these cores: a whole issue as the query
# would take a second. Its title and opening words say what the task is about.
QUERY_WORDS = 48
EventSink = Callable[[str, dict[str, Any]], Awaitable[None]]


class TaskMemory:
    """Project memory as one task's round uses it; :meth:`attempt` gives each attempt its hooks
    for the agent's memory tools and the files it opens."""

    def __init__(self, memories: MemoryStore, task: Task, base_tree: Path, journal: EventSink) -> None:
        self.memories = memories
        self.task = task
        self.project = project_key(task.repo)
        self.base_tree = base_tree
        self.journal = journal
        self.withheld = Withheld()
        self.given_ids: frozenset[int] = frozenset()
        self.scope = FileScope()

    async def given(self, whole: Collection[str] = ()) -> str:
        """Sync the instruction files, pick the memories for this task (none of the files in
        ``whole``, which the prompt gives already), record them as given, and return them
        rendered for the agent's context."""
        try:
            recalled = await asyncio.to_thread(self._given, whole)
        except MemoryStoreError as error:
            await self.journal("memory_unavailable", {"reason": error.message})
            return ""
        lines = [item.render() for item in recalled]
        await self.journal("memories_given", {"ids": [item.memory.id for item in recalled], "lines": lines,
                                              "stale": [item.memory.id for item in recalled if item.stale]})
        return "\n".join(lines)

    def _given(self, whole: Collection[str]) -> list[Recalled]:
        sync_instructions(self.memories, self.project, self.base_tree)
        self.withheld = withheld_ids(self.memories, self.project, whole)
        named = [Recalled(memory, 1.0) for memory in named_rules(self.memories, self.project, self.task.instruction)]
        recalled = named + select(self.memories, self.project, task_query(self.task), GIVEN,
                                  exclude=self.withheld.ids | {item.memory.id for item in named},
                                  repo_dir=self.base_tree)
        self.given_ids = frozenset(item.memory.id for item in recalled)
        self.scope = FileScope.load(self.memories, self.project, exclude=self.withheld.never_scoped)
        self.memories.record_use(self.task.id, [item.memory.id for item in recalled], "given")
        return recalled

    def attempt(self, journal: EventSink) -> AttemptMemory:
        """The hooks of one attempt: what it has been shown is its own."""
        return AttemptMemory(self, journal)

    # The agent's tools (errand.agent.memory_tools.MemoryHooks)

    async def recall(self, query: str, shown: set[int] | None = None) -> str:
        """What memory holds about ``query``: not what the prompt holds whole nor manual rules,
        but rules scoped to files, since the agent asked (their ids go into ``shown``)."""
        try:
            recalled = await asyncio.to_thread(retrieve, self.memories, self.project, query, RECALLED,
                                               repo_dir=self.base_tree, exclude=self.withheld.never_scoped)
        except MemoryStoreError as error:
            return f"error: memory is unavailable: {error.message}"
        if shown is not None:
            shown.update(item.memory.id for item in recalled)
        await asyncio.to_thread(self.memories.record_use, self.task.id, [m.memory.id for m in recalled], "recalled")
        if not recalled:
            return f"nothing in this project's memory matches {query!r}"
        return "\n".join(item.render() for item in recalled)

    async def remember(self, text: str) -> str:
        try:
            memory = await asyncio.to_thread(
                self.memories.add, self.project, text, kind="fact", status="proposed", confidence=0.5,
                provenance=Provenance.task(self.task.id, None, "proposed by the agent (remember tool)"))
        except MemoryStoreError as error:
            return f"error: not remembered: {error.message}"
        await self.journal("memory_proposed", {"id": memory.id, "text": memory.text})
        return (f"proposed as memory {memory.id}; a person approves it before later tasks are given it"
                if memory.status.value == "proposed" else f"already known as memory {memory.id}")

    async def distill(self, trajectory: list[Message], model: Model, journal: EventSink | None = None) -> None:
        """Distil the finished run's ``trajectory`` into proposed memories; the event (on ``journal``,
        the run's whose trajectory it was) carries the call's usage, which the task's figures count."""
        result = await distill(self.memories, self.project, self.task.id, trajectory, model)
        usage = result.usage
        await (journal or self.journal)("memories_proposed", {
            "ids": [memory.id for memory in result.proposed], "refused": len(result.rejected),
            "input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens,
            "cache_read_tokens": usage.cache_read_tokens, "cache_write_tokens": usage.cache_write_tokens,
            "cost": result.cost})

    # What errand observed

    async def observe(self, environment: Environment, evidence: Evidence, setup_ran: bool) -> None:
        """The commands as they ran: setup (when it ran this round), tests and lint on the result."""
        observed: list[tuple[str, CommandKind, int | None]] = []
        if setup_ran:
            observed += [(command, "setup", 0) for command in environment.setup]
        if evidence.tests_after is not None:
            observed.append((evidence.tests_after.command, "test", evidence.tests_after.exit_code))
        if evidence.lint_after is not None:
            observed.append((evidence.lint_after.command, "lint", evidence.lint_after.exit_code))
        try:
            for command, kind, exit_code in observed:
                if exit_code is not None:
                    await asyncio.to_thread(observe_command, self.memories, self.project, command, exit_code,
                                            kind=kind, task_id=self.task.id)
        except MemoryStoreError as error:
            log.warning("task %s: observing commands failed: %s", self.task.id, error.message)


class AttemptMemory:
    """One attempt's hooks: the memory tools, and the rules and memories scoped to the files it
    opens, each shown once (never one the attempt was given when it started)."""

    def __init__(self, link: TaskMemory, journal: EventSink) -> None:
        self.link = link
        self.journal = journal
        self.shown: set[int] = set(link.given_ids)

    async def recall(self, query: str) -> str:
        return await self.link.recall(query, self.shown)

    async def remember(self, text: str) -> str:
        return await self.link.remember(text)

    async def opened(self, path: str) -> str:
        """What the agent should know about ``path`` (relative to the repository), not shown to it before."""
        try:
            fresh = await asyncio.to_thread(self.link.scope.matching, path, skip=self.shown, limit=SURFACED)
        except MemoryStoreError as error:
            log.warning("task %s: reading memories scoped to %s failed: %s", self.link.task.id, path, error.message)
            return ""
        if not fresh:
            return ""
        self.shown.update(memory.id for memory in fresh)
        try:
            await asyncio.to_thread(self.link.memories.record_use, self.link.task.id,
                                    [memory.id for memory in fresh], "given")
        except MemoryStoreError as error:
            log.warning("task %s: recording surfaced memories failed: %s", self.link.task.id, error.message)
        lines = [Recalled(memory, 1.0).render() for memory in fresh]
        await self.journal("memories_surfaced", {"path": path, "ids": [memory.id for memory in fresh],
                                                 "lines": lines})
        return f"[project rules and memories for {path}; shown once, follow them]\n" + "\n".join(lines)


def task_query(task: Task) -> str:
    """What a task is about, short enough to embed quickly: its title, then the opening of
    its instruction."""
    words = task.instruction.split()
    title = task.title.rstrip("…").strip()
    opening = " ".join(words[:QUERY_WORDS])
    return opening if opening.startswith(title) else f"{title}\n{opening}"


def observe_verdict(memories: MemoryStore | None, task: Task, verdict: str, text: str | None) -> None:
    """A person's review as memory: a rejection's reason, a follow-up's instruction, an accept."""
    if memories is None:
        return
    project = project_key(task.repo)
    try:
        if verdict == "followup" and text:
            observe_followup(memories, project, task.id, text)
        else:
            observe_review(memories, project, task.id, verdict, text)
    except MemoryStoreError as error:
        log.warning("task %s: remembering the review failed: %s", task.id, error.message)
