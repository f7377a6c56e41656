"""The HTTP API for project memory: what ``errand memory`` does, through the same MemoryStore.

A person's memory (``POST /api/memories``) is active unless ``proposed`` is set,
and a near-duplicate is merged into the memory the project already has (the
answer is then 200, not 201, and names that memory). ``GET
/api/tasks/{id}/memories`` is what a task was given and recalled, with whether
the memory was flagged stale when it was given.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request, Response
from pydantic import BaseModel, Field

from errand.memory import Kind, Memory, MemoryStore, Provenance, Status, project_key
from errand.repo.workcopy import is_url
from errand.server.config import ServerConfig
from errand.server.schemas import ShortText, Text
from errand.tasks.events import MemoriesGiven
from errand.tasks.service import TaskService

__all__ = ["MemoryId", "MemoryIn", "MemoryOut", "TaskMemoryOut", "add_memory_for", "memory_detail", "memory_store",
           "router", "task_memories"]

router = APIRouter(prefix="/api", tags=["memory"])
MemoryId = Annotated[int, Path(ge=1, le=2**62)]
TaskId = Annotated[Text, Path(max_length=64)]
PROBLEMS: dict[int | str, dict[str, Any]] = {
    status: {"description": phrase, "content": {"application/problem+json": {}}}
    for status, phrase in ((404, "No such memory (or task)"),
                           (422, "The input was refused (a secret, bad text, an illegal status change); "
                                 "nothing changed"))}


class MemoryOut(BaseModel):
    id: int
    project: str
    kind: Kind
    text: str
    status: Status
    provenance: Provenance  # the memory layer's own value object, validated as a dataclass
    source: str = Field(description="The provenance in one line, as agents are shown it.")
    confidence: float
    created_at: float
    updated_at: float
    last_used_at: float | None
    use_count: int
    evidence: int = Field(description="How many observations were merged into it.")
    supersedes: int | None
    superseded_by: int | None
    archived_reason: str | None
    citations: list[str]

    @classmethod
    def of(cls, memory: Memory) -> MemoryOut:
        return cls.model_validate(memory.to_json())


class MemoryPage(BaseModel):
    memories: list[MemoryOut]
    next: int | None = Field(description="Pass as `offset` for the next (older) page; null on the last page.")


class MemoryDetail(MemoryOut):
    supersedes_memory: MemoryOut | None = Field(None, description="The memory this one replaced.")
    superseded_by_memory: MemoryOut | None = Field(None, description="The memory that replaced this one.")


class MemoryIn(BaseModel):
    repo: ShortText = Field(description="The project: a repository path on the server's machine, or a git URL "
                                        "(scoped as `errand memory --repo` does).")
    text: Annotated[Text, Field(max_length=100_000)] = Field(description="One self-contained statement.")
    kind: Kind = Kind.FACT
    proposed: bool = Field(False, description="Add it as proposed rather than active.")
    supersedes: int | None = Field(None, ge=1, le=2**62, description="The id of a memory this one replaces.")


class MemoryEdit(BaseModel):
    text: Annotated[Text, Field(max_length=100_000)] | None = None
    kind: Kind | None = None
    confidence: float | None = Field(None, ge=0.0, le=1.0)


class TaskMemoryOut(BaseModel):
    memory: MemoryOut
    how: list[str] = Field(description="How the task met it: given (in its context), recalled, used.")
    stale: bool = Field(description="Its citations no longer held in the tree when it was given.")


def memory_store(request: Request) -> MemoryStore:
    memories: MemoryStore = request.app.state.memories
    return memories


def add_memory_for(request: Request, body: MemoryIn) -> Memory:
    """A person's memory, scoped to ``body.repo`` after the server's own repository rules."""
    config: ServerConfig = request.app.state.config
    if not is_url(body.repo):
        config.check_repo_path(body.repo)
    return memory_store(request).add(
        project_key(body.repo), body.text, kind=body.kind, provenance=Provenance.person(),
        status=Status.PROPOSED if body.proposed else Status.ACTIVE, supersedes=body.supersedes)


def task_memories(tasks: TaskService, memories: MemoryStore, task_id: str) -> list[TaskMemoryOut]:
    """Each memory the task met, once, in the order first met, with every way it met it."""
    tasks.get_task(task_id)
    stale: set[int] = set()
    for event in tasks.events(task_id, kinds=["memories_given"], limit=1_000_000):
        stale.update(MemoriesGiven.of(event).stale)
    met: dict[int, TaskMemoryOut] = {}
    for memory, how in memories.uses(task_id):
        entry = met.setdefault(memory.id, TaskMemoryOut(memory=MemoryOut.of(memory), how=[],
                                                        stale=memory.id in stale))
        if how not in entry.how:
            entry.how.append(how)
    return list(met.values())


@router.get("/memories", response_model=MemoryPage)
def list_memories(
    request: Request, project: Annotated[Text | None, Query(max_length=4096)] = None,
    status: Status | None = None, kind: Kind | None = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50, offset: Annotated[int, Query(ge=0, le=2**40)] = 0,
) -> MemoryPage:
    """Memories, newest first, a page at a time; ``project`` is a project key as listed by /memories/projects."""
    found = memory_store(request).list_memories(project or None, status=status, kind=kind, limit=limit,
                                                offset=offset)
    return MemoryPage(memories=[MemoryOut.of(m) for m in found],
                      next=offset + limit if len(found) == limit else None)


@router.get("/memories/projects", response_model=list[str])
def list_projects(request: Request) -> list[str]:
    """The projects that have memories."""
    return memory_store(request).projects()


@router.post("/memories", status_code=201, response_model=MemoryOut, responses={
    200: {"description": "Merged into a memory the project already had", "model": MemoryOut}, **PROBLEMS})
def add_memory(request: Request, body: MemoryIn, response: Response) -> MemoryOut:
    """Add a person's memory (active unless ``proposed``); a near-duplicate is merged instead."""
    memory = add_memory_for(request, body)
    if memory.evidence > 1:
        response.status_code = 200
    response.headers["Location"] = f"/api/memories/{memory.id}"
    return MemoryOut.of(memory)


@router.get("/memories/{memory_id}", response_model=MemoryDetail, responses=PROBLEMS)
def show_memory(request: Request, memory_id: MemoryId) -> MemoryDetail:
    """One memory with its provenance, and the memories it replaced and was replaced by."""
    return memory_detail(memory_store(request), memory_id)


def memory_detail(memories: MemoryStore, memory_id: int) -> MemoryDetail:
    memory = memories.get(memory_id)
    return MemoryDetail(**MemoryOut.of(memory).model_dump(),
                        supersedes_memory=_linked(memories, memory.supersedes),
                        superseded_by_memory=_linked(memories, memory.superseded_by))


def _linked(memories: MemoryStore, memory_id: int | None) -> MemoryOut | None:
    return MemoryOut.of(memories.get(memory_id)) if memory_id is not None else None


@router.patch("/memories/{memory_id}", response_model=MemoryOut, responses=PROBLEMS)
def edit_memory(request: Request, memory_id: MemoryId, body: MemoryEdit) -> MemoryOut:
    """Correct a memory's text, kind or confidence; its provenance stays."""
    return MemoryOut.of(memory_store(request).edit(memory_id, text=body.text, kind=body.kind,
                                                   confidence=body.confidence))


@router.post("/memories/{memory_id}/approve", response_model=MemoryOut, responses=PROBLEMS)
def approve_memory(request: Request, memory_id: MemoryId) -> MemoryOut:
    """proposed → active: agents are given it from now on."""
    return MemoryOut.of(memory_store(request).approve(memory_id))


@router.post("/memories/{memory_id}/reject", response_model=MemoryOut, responses=PROBLEMS)
def reject_memory(request: Request, memory_id: MemoryId) -> MemoryOut:
    """proposed → archived (rejected); the same proposal never becomes active again."""
    return MemoryOut.of(memory_store(request).reject(memory_id))


@router.post("/memories/{memory_id}/archive", response_model=MemoryOut, responses=PROBLEMS)
def archive_memory(request: Request, memory_id: MemoryId) -> MemoryOut:
    """Keep it listed but never give it to an agent again."""
    return MemoryOut.of(memory_store(request).archive(memory_id))


@router.delete("/memories/{memory_id}", response_model=MemoryOut, responses=PROBLEMS)
def remove_memory(request: Request, memory_id: MemoryId) -> MemoryOut:
    """Delete a memory for good; answers with what was deleted."""
    return MemoryOut.of(memory_store(request).remove(memory_id))


@router.get("/tasks/{task_id}/memories", response_model=list[TaskMemoryOut], responses=PROBLEMS)
async def show_task_memories(request: Request, task_id: TaskId) -> list[TaskMemoryOut]:
    """The memories the task was given and recalled, in the order it first met them."""
    tasks: TaskService = request.app.state.service
    return await asyncio.to_thread(task_memories, tasks, memory_store(request), task_id)
