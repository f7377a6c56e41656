"""The HTTP API for tasks: everything the CLI does, through the same TaskService."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Header, Path, Query, Request, Response
from fastapi.responses import PlainTextResponse, StreamingResponse
from pydantic import BaseModel

from errand.errors import ConfigError
from errand.repo.workcopy import is_url
from errand.server.config import ServerConfig
from errand.server.live import Hub, sse_comment
from errand.server.schemas import (
    AcceptIn,
    AttemptOut,
    FollowupIn,
    PostedOut,
    ReasonIn,
    TaskDetail,
    TaskIn,
    TaskPage,
    Text,
    TextIn,
    without_patch,
)
from errand.tasks.events import text_of
from errand.tasks.lifecycle import TaskState
from errand.tasks.records import Event, Review, Run, Task
from errand.tasks.service import MAX_ATTEMPTS, Accepted, TaskService

__all__ = ["checked_submit", "detail", "resume_point", "router", "task_service"]

router = APIRouter(prefix="/api", tags=["tasks"])
TaskId = Annotated[Text, Path(max_length=64)]
Attempt = Annotated[int | None, Query(ge=1, le=MAX_ATTEMPTS, description="An attempt other than the best-ranked.")]
PROBLEMS: dict[int | str, dict[str, Any]] = {
    status: {"description": phrase, "content": {"application/problem+json": {}}}
    for status, phrase in ((404, "No such task"),
                           (409, "The task's state does not allow it, or it needs `confirm` (`needs_confirmation`)"),
                           (422, "The input was refused; nothing changed"))}


def task_service(request: Request) -> TaskService:
    service: TaskService = request.app.state.service
    return service


def checked_submit(request: Request, body: TaskIn) -> Task:
    """Submit after the server's own rules: repositories inside ``repo_roots``, no scripted models
    (they name a file on the server) unless allowed."""
    config: ServerConfig = request.app.state.config
    if not is_url(body.repo):
        config.check_repo_path(body.repo)
    provider, colon, _ = (body.model or "").partition(":")
    # Only an ad-hoc scripted:PATH names a file of the caller's choosing; a named model is the server's own.
    if colon and provider.strip().lower() == "scripted" and not config.allow_scripted_models:
        raise ConfigError("scripted models name a file on the server and are off here "
                          "(errand serve --allow-scripted-models turns them on)", code="model_not_allowed")
    return task_service(request).submit(body.instruction, repo=body.repo, base=body.base, model=body.model,
                                    attempts=body.attempts, title=body.title, agent=body.agent)


@router.post("/tasks", status_code=201, response_model=Task, responses=PROBLEMS)
def create_task(request: Request, body: TaskIn, response: Response) -> Task:
    """Queue a task; the server's engine runs it."""
    task = checked_submit(request, body)
    response.headers["Location"] = f"/api/tasks/{task.id}"
    return task


def fast_json(value: object) -> Response:
    """JSON of records already shaped as the schema says, without validating them again (the
    hot read paths: at hundreds of requests a second, re-validation is most of the work)."""
    return Response(json.dumps(value, default=_plain, separators=(",", ":")), media_type="application/json")


def _plain(value: object) -> object:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {field.name: getattr(value, field.name) for field in dataclasses.fields(value)}
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    raise TypeError(f"{type(value).__name__} is not JSON")


@router.get("/tasks", response_model=TaskPage)
async def list_tasks(request: Request, state: TaskState | None = None,
               repo: Annotated[Text | None, Query(max_length=4096)] = None,
               limit: Annotated[int, Query(ge=1, le=200)] = 50,
               before: Annotated[Text | None, Query(max_length=64,
                                                         description="The last id of the previous page.")] = None,
               ) -> Response:
    """Tasks, newest first, a page at a time."""
    service = task_service(request)
    tasks = await asyncio.to_thread(service.list_tasks, state=state, repo=repo, limit=limit, before=before)
    return fast_json({"tasks": tasks, "next": tasks[-1].id if len(tasks) == limit else None})


def detail(service: TaskService, task_id: str, *, with_progress: bool = False) -> TaskDetail:
    task = service.get_task(task_id)
    question = None
    if task.state is TaskState.NEEDS_INPUT:
        asked = service.last_event(task_id, ["question"])
        question = text_of(asked) if asked is not None else None
    runs = service.runs(task_id)
    figures = service.figures(task, runs).to_json() if with_progress else None
    return TaskDetail(**vars(task), runs=[without_patch(r) for r in runs], reviews=service.reviews(task_id),
                      question=question, progress=figures)


@router.get("/tasks/{task_id}", response_model=TaskDetail, responses=PROBLEMS)
async def show_task(request: Request, task_id: TaskId) -> Response:
    """A task with its runs, its reviews, the question it waits on, and its progress: elapsed
    time, steps, tokens and cost, per attempt of the latest round against its budgets."""
    return fast_json(await asyncio.to_thread(detail, task_service(request), task_id, with_progress=True))


@router.get("/tasks/{task_id}/events", response_model=list[Event], responses=PROBLEMS)
def task_events(request: Request, task_id: TaskId, after: Annotated[int, Query(ge=0, le=2**62)] = 0,
                limit: Annotated[int, Query(ge=1, le=5000)] = 1000,
                kind: Annotated[list[Text] | None, Query(description="Only events of these kinds.")] = None,
                ) -> list[Event]:
    """The task's events after the id ``after``, oldest first."""
    service = task_service(request)
    service.get_task(task_id)
    return service.events(task_id, after, limit, kinds=kind)


@router.get("/tasks/{task_id}/events/stream", responses={
    200: {"description": "Server-sent events; each `id:` is the event's id", "content": {"text/event-stream": {}}},
    **PROBLEMS})
async def stream_events(request: Request, task_id: TaskId,
                        after: Annotated[int, Query(ge=0, le=2**62)] = 0,
                        last_event_id: Annotated[str | None, Header(max_length=32)] = None) -> StreamingResponse:
    """Every event of the task after ``after`` (or the ``Last-Event-ID`` header), then each new one
    as it happens. Reconnect with the last id seen and nothing is missed."""
    service = task_service(request)
    await asyncio.to_thread(service.get_task, task_id)
    start = resume_point(last_event_id, after)
    hub: Hub = request.app.state.hub

    async def frames() -> AsyncIterator[bytes]:
        yield b"retry: 1000\n\n"
        async for batch in hub.watch(task_id, start):
            if isinstance(batch, list):
                feed = hub.feeds[task_id]
                yield b"".join(feed.frame(event) for event in batch)  # one write for the batch
            else:
                yield sse_comment("keepalive")

    return StreamingResponse(frames(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


def resume_point(last_event_id: str | None, after: int) -> int:
    if last_event_id is not None and last_event_id.strip().isdigit():
        return int(last_event_id.strip())
    return after


@router.get("/tasks/{task_id}/diff", response_class=PlainTextResponse, responses={
    200: {"description": "The chosen attempt's patch", "content": {"text/x-diff": {}}}, **PROBLEMS})
def task_diff(request: Request, task_id: TaskId, attempt: Attempt = None) -> PlainTextResponse:
    """The patch of the best-ranked attempt of the last finished round (or of ``attempt``)."""
    run = task_service(request).chosen_run(task_id, attempt)
    outcome = run.outcome
    return PlainTextResponse(outcome.patch if outcome else "", media_type="text/x-diff")


def _attempt(service: TaskService, run: Run) -> AttemptOut:
    evidence = service.evidence(run)
    return AttemptOut(run=without_patch(run), rank=run.outcome.rank if run.outcome else 0,
                      evidence=evidence.to_json() if evidence else None)


@router.get("/tasks/{task_id}/evidence", response_model=AttemptOut, responses=PROBLEMS)
def task_evidence(request: Request, task_id: TaskId, attempt: Attempt = None) -> AttemptOut:
    """The evidence and confidence behind the chosen attempt's diff."""
    service = task_service(request)
    return _attempt(service, service.chosen_run(task_id, attempt))


@router.get("/tasks/{task_id}/attempts", response_model=list[AttemptOut], responses=PROBLEMS)
def task_attempts(request: Request, task_id: TaskId) -> list[AttemptOut]:
    """The attempts of the last finished round, best first."""
    service = task_service(request)
    return [_attempt(service, run) for run in service.round_runs(task_id)]


@router.post("/tasks/{task_id}/accept", response_model=Accepted, responses=PROBLEMS)
def accept_task(request: Request, task_id: TaskId, body: AcceptIn) -> Accepted:
    """Commit the chosen attempt's diff on the task's branch in its repository. A diff whose tests
    fail after it, at low confidence, or that deletes files is refused (409, code `needs_confirmation`,
    its `reasons` listed) unless the request says `confirm: true`."""
    if body.into is not None:
        request.app.state.config.check_repo_path(body.into)
    return task_service(request).accept(task_id, attempt=body.attempt, into=body.into, confirm=body.confirm)


@router.post("/tasks/{task_id}/reject", response_model=Review, responses=PROBLEMS)
def reject_task(request: Request, task_id: TaskId, body: ReasonIn) -> Review:
    return task_service(request).reject(task_id, body.reason)


@router.post("/tasks/{task_id}/followup", response_model=Review | Task, responses=PROBLEMS)
def followup_task(request: Request, task_id: TaskId, body: FollowupIn) -> Review | Task:
    """More work: a new round of the task on its branch (the review is returned); of an accepted
    task, a new task starting from its commit, with ``parent_id`` naming it (that task is returned).
    Each of ``comments`` is anchored in the round's instruction: its file, its lines, those lines
    quoted from the diff, and its text. A comment on a file the diff does not change, or on lines
    it does not have, is refused (422) and nothing changes. The comments are on the diff of
    ``attempt`` (the best-ranked attempt of the last round if omitted)."""
    return task_service(request).followup(task_id, body.text, [c.comment() for c in body.comments],
                                          attempt=body.attempt)


@router.post("/tasks/{task_id}/retry", response_model=Task, responses=PROBLEMS)
def retry_task(request: Request, task_id: TaskId) -> Task:
    """Run a failed or cancelled task again: a new round from where its last one started."""
    return task_service(request).retry(task_id)


@router.post("/tasks/{task_id}/answer", response_model=PostedOut, responses=PROBLEMS)
def answer_task(request: Request, task_id: TaskId, body: TextIn) -> PostedOut:
    """Answer the question the task waits on; its run resumes."""
    return PostedOut(event_id=task_service(request).answer(task_id, body.text))


@router.post("/tasks/{task_id}/message", response_model=PostedOut, responses=PROBLEMS)
def message_task(request: Request, task_id: TaskId, body: TextIn) -> PostedOut:
    """A message for the running agent, delivered at its next step."""
    return PostedOut(event_id=task_service(request).message(task_id, body.text))


@router.post("/tasks/{task_id}/cancel", response_model=Task, responses=PROBLEMS)
def cancel_task(request: Request, task_id: TaskId) -> Task:
    return task_service(request).cancel(task_id)
