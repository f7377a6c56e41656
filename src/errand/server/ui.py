"""The web UI's pages: task list, task (live log, memories used), diff review, sandboxes, login.
(The memory pages are :mod:`errand.server.ui_memory`.)

Pages are rendered on the server (Jinja2); htmx makes links and forms swap the
page without a reload, and a few lines of script (``static/live.js``) append
the live log from server-sent events. Every form works without script too.
Every write goes through the same TaskService as the API and the CLI.
"""

from __future__ import annotations

import asyncio
import http
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Form, Header, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response, StreamingResponse
from fastapi.templating import Jinja2Templates
from markupsafe import Markup

from errand import _figures as figures
from errand.errors import ConfigError, ErrandError
from errand.repo.workcopy import is_url
from errand.sandbox import AsyncSandbox
from errand.server import diffview, taskview
from errand.server.api_memory import memory_store, task_memories
from errand.server.api_tasks import checked_submit, detail, resume_point, task_service
from errand.server.config import ServerConfig
from errand.server.eventview import render_event
from errand.server.live import Hub, sse_comment, sse_frame
from errand.server.problems import status_of
from errand.server.schemas import TaskIn, Text
from errand.server.security import SESSION_COOKIE, Keys, check_csrf, csrf_token
from errand.tasks.errors import NeedsConfirmation
from errand.tasks.guards import accept_risks
from errand.tasks.lifecycle import ACTIVE, TaskState
from errand.tasks.records import Task, Verdict
from errand.tasks.round.steps import RANKING_RULE
from errand.tasks.service import MAX_ATTEMPTS, TaskService

__all__ = ["Confirmed", "Csrf", "FormText", "confirm_page", "error_page", "local_path", "page", "redirect", "router",
           "templates"]

router = APIRouter(include_in_schema=False)
templates = Jinja2Templates(directory=str(Path(__file__).parent / "templates"))
LOG_LIMIT = 2000
CONTEXT_LIMIT = 500  # lines one "show more" may fetch
EGRESS_SHOWN = 50
Csrf = Annotated[str, Form(alias="csrf_token", max_length=128)]
FormText = Annotated[Text, Form(max_length=100_000)]


def _age(timestamp: float) -> str:
    seconds = time.time() - timestamp
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{max(0, int(seconds))}s"


templates.env.filters.update(age=_age, duration=figures.duration, tokens=figures.tokens, money=figures.money,
                             bytes=figures.size)
templates.env.globals["csrf_token"] = csrf_token
templates.env.globals["MAX_ATTEMPTS"] = MAX_ATTEMPTS


def page(request: Request, name: str, status: int = 200, **context: Any) -> HTMLResponse:
    keys: Keys = request.app.state.keys
    return templates.TemplateResponse(request, name, {"login_required": keys.token is not None, **context},
                                      status_code=status)


def error_page(request: Request, status: int, detail: str) -> HTMLResponse:
    """What a browser shows for an error: the status in words, errand's sentence, a way on."""
    return page(request, "error.html", status, code=status, phrase=http.HTTPStatus(status).phrase, detail=detail,
                nav="")


def redirect(url: str) -> RedirectResponse:
    return RedirectResponse(url, status_code=303)


Confirmed = Annotated[str | None, Form(max_length=8)]


def confirm_page(request: Request, *, heading: str, reasons: list[str], action: str, button: str, back: str,
                 fields: dict[str, Any] | None = None) -> HTMLResponse:
    """The second step of a risky or final form: what it will do and why it asks, a button that posts
    the same form again with ``confirm=yes``, and a way back that changes nothing (no script: the CSP
    allows none inline, and the step works without any)."""
    return page(request, "confirm.html", heading=heading, reasons=reasons, action=action, button=button,
                back=back, fields=fields or {})


# ------------------------------------------------------------------ task list


@router.get("/", response_class=HTMLResponse)
def task_list(request: Request, state: Annotated[str | None, Query(max_length=32)] = None,
              repo: Annotated[Text | None, Query(max_length=4096)] = None,
              before: Annotated[Text | None, Query(max_length=64)] = None) -> HTMLResponse:
    return _list_page(request, state or None, repo or None, before or None)


def _list_page(request: Request, state: str | None, repo: str | None, before: str | None, *, status: int = 200,
               error: str | None = None, form: dict[str, Any] | None = None) -> HTMLResponse:
    valid_state = state if state in TaskState.__members__.values() else None
    service = task_service(request)
    tasks = service.list_tasks(state=valid_state, repo=repo, limit=50, before=before)
    figures = {task.id: service.figures(task) for task in tasks}
    return page(request, "tasks.html", status, tasks=tasks, figures=figures, states=list(TaskState), state=valid_state,
                 repo=repo or "", next=tasks[-1].id if len(tasks) == 50 else None, error=error,
                 form=form or {"base": "HEAD", "attempts": 1})


@router.post("/tasks", response_class=HTMLResponse)
def create_task(request: Request, csrf: Csrf, instruction: FormText, repo: FormText,
                base: Annotated[Text, Form(max_length=4096)] = "HEAD",
                model: Annotated[Text, Form(max_length=4096)] = "",
                attempts: Annotated[int, Form(ge=1, le=MAX_ATTEMPTS)] = 1) -> Response:
    check_csrf(request, csrf)
    body = TaskIn(instruction=instruction, repo=repo, base=base or "HEAD", model=model or None, attempts=attempts)
    try:
        task = checked_submit(request, body)
    except ErrandError as error:
        form = {"instruction": instruction, "repo": repo, "base": base, "model": model, "attempts": attempts}
        return _list_page(request, None, None, None, status=status_of(error), error=error.message, form=form)
    return redirect(f"/tasks/{quote(task.id)}")


# ------------------------------------------------------------------ one task


@router.get("/tasks/{task_id}", response_class=HTMLResponse)
async def task_page(request: Request, task_id: Text,
                    attempt: Annotated[int | None, Query(ge=1, le=10_000)] = None,
                    output: Annotated[str | None, Query(max_length=8)] = None) -> HTMLResponse:
    return await _task_page(request, task_id, show_attempt=attempt, hide_output=output == "hide")


async def _task_page(request: Request, task_id: str, *, status: int = 200, error: str | None = None,
                     show_attempt: int | None = None, hide_output: bool = False) -> HTMLResponse:
    service = task_service(request)
    context = await _task_context(request, task_id)
    events = await asyncio.to_thread(service.events, task_id, 0, 1_000_000)
    omitted = max(0, len(events) - LOG_LIMIT)
    names = context["names"]
    shown = [e for e in events[omitted:] if show_attempt is None or e.run_id not in names.rounds
             or names.rounds[e.run_id][1] == show_attempt]
    log = Markup("").join(render_event(e, names) for e in shown)
    return page(request, "task.html", status, **context, omitted=omitted, log=log,
                after=events[-1].id if events else 0, error=error, show_attempt=show_attempt,
                hide_output=hide_output)


async def _task_context(request: Request, task_id: str) -> dict[str, Any]:
    """Everything the task page's header, panel and memories show; the panel's refresh
    draws the same, so a refreshed panel never disagrees with a freshly loaded page."""
    service = task_service(request)

    def read() -> dict[str, Any]:
        task = detail(service, task_id)
        runs = task.runs  # read once: detail has them (without their patches, which nothing here needs)
        return {"task": task, "panel": _panel(task), "names": taskview.RunNames.of(task, runs),
                "progress": service.figures(task, runs), "cause": taskview.cause(service, task),
                "report": taskview.report(service, task),
                "next": taskview.next_steps(service, task),
                "memories": task_memories(service, memory_store(request), task_id)}

    context = await asyncio.to_thread(read)
    live = TaskState(context["task"].state) in ACTIVE
    context["sandboxes"] = await taskview.task_sandboxes(task_id) if live else []
    return context


def _panel(task: Any) -> dict[str, Any]:
    state = TaskState(task.state)
    finished = [outcome for r in task.runs if (outcome := r.outcome) is not None]
    changed = [outcome for outcome in finished if outcome.changed]
    return {"needs_input": state is TaskState.NEEDS_INPUT, "can_message": state in ACTIVE or state is TaskState.QUEUED,
            "can_cancel": state in ACTIVE or state is TaskState.QUEUED,
            "has_result": bool(changed) and state in (TaskState.READY_FOR_REVIEW, TaskState.REJECTED,
                                                      TaskState.ACCEPTED),
            "reviewable": state in (TaskState.READY_FOR_REVIEW, TaskState.REJECTED),
            "retryable": state in (TaskState.FAILED, TaskState.CANCELLED),
            "followable": state in (TaskState.REJECTED, TaskState.ANSWERED, TaskState.FAILED, TaskState.CANCELLED,
                                    TaskState.ACCEPTED),
            "live": state not in (TaskState.ACCEPTED, TaskState.ANSWERED, TaskState.FAILED, TaskState.CANCELLED)}


@router.get("/tasks/{task_id}/panel", response_class=HTMLResponse)
async def task_panel(request: Request, task_id: Text) -> HTMLResponse:
    """The task page's header, panel and memories, as they stand now (the panel's target,
    the others swapped in out of band)."""
    return page(request, "_refresh.html", **await _task_context(request, task_id))


@router.get("/tasks/{task_id}/live")
async def task_live(request: Request, task_id: Text, after: Annotated[int, Query(ge=0, le=2**62)] = 0,
                    last_event_id: Annotated[str | None, Header(max_length=32)] = None) -> StreamingResponse:
    """The log's new lines as HTML in server-sent events, and a ``state`` event when the task moves."""
    service = task_service(request)
    await asyncio.to_thread(service.get_task, task_id)
    start = resume_point(last_event_id, after)
    hub: Hub = request.app.state.hub

    async def frames() -> AsyncIterator[bytes]:
        yield b"retry: 1000\n\n"
        state = None
        names = await asyncio.to_thread(_names, service, task_id)
        async for batch in hub.watch(task_id, start):
            chunk = b""
            if isinstance(batch, list):
                if not all(names.known(e.run_id) for e in batch):
                    names = await asyncio.to_thread(_names, service, task_id)  # a new round began
                chunk = b"".join(sse_frame(e.id, "log", str(html)) if (html := render_event(e, names))
                                 else sse_frame(e.id, "skip", "") for e in batch)
            feed_state = hub.feeds[task_id].state
            if feed_state is not None and feed_state != state:
                state = feed_state
                chunk += f"event: state\ndata: {state.value}\n\n".encode()
            yield chunk or sse_comment("keepalive")

    return StreamingResponse(frames(), media_type="text/event-stream", headers={"Cache-Control": "no-store"})


def _names(service: TaskService, task_id: str) -> taskview.RunNames:
    return taskview.RunNames.of(service.get_task(task_id), service.runs(task_id))


async def _act(request: Request, task_id: str, action: Any, *, then: str = "") -> Response:
    try:
        await asyncio.to_thread(action)
    except ErrandError as error:
        if then == "review":
            return await _review_page(request, task_id, None, False, status=status_of(error), error=error.message)
        return await _task_page(request, task_id, status=status_of(error), error=error.message)
    return redirect(f"/tasks/{quote(task_id)}" + (f"/{then}" if then else ""))


@router.post("/tasks/{task_id}/answer", response_class=HTMLResponse)
async def answer(request: Request, task_id: Text, csrf: Csrf, text: FormText) -> Response:
    check_csrf(request, csrf)
    return await _act(request, task_id, lambda: task_service(request).answer(task_id, text))


@router.post("/tasks/{task_id}/message", response_class=HTMLResponse)
async def message(request: Request, task_id: Text, csrf: Csrf, text: FormText) -> Response:
    check_csrf(request, csrf)
    return await _act(request, task_id, lambda: task_service(request).message(task_id, text))


@router.post("/tasks/{task_id}/cancel", response_class=HTMLResponse)
async def cancel(request: Request, task_id: Text, csrf: Csrf, confirm: Confirmed = None) -> Response:
    check_csrf(request, csrf)
    if confirm != "yes":
        task = await asyncio.to_thread(task_service(request).get_task, task_id)
        return confirm_page(request, heading=f"Cancel task {task.id}?", action=f"/tasks/{quote(task.id)}/cancel",
                            reasons=[f"“{task.title}” is {task.state.value.replace('_', ' ')}: cancelling ends its "
                                     "sandboxes, and nothing of it lands."],
                            button="Cancel the task", back=f"/tasks/{quote(task.id)}")
    return await _act(request, task_id, lambda: task_service(request).cancel(task_id))


@router.post("/tasks/{task_id}/accept", response_class=HTMLResponse)
async def accept(request: Request, task_id: Text, csrf: Csrf, attempt: Annotated[int | None, Form(ge=1)] = None,
                 into: Annotated[Text | None, Form(max_length=4096)] = None, confirm: Confirmed = None) -> Response:
    """Accept; a diff whose tests fail after it, at low confidence, or that deletes files first
    gets a confirm step naming why."""
    check_csrf(request, csrf)
    config: ServerConfig = request.app.state.config
    risky: list[NeedsConfirmation] = []

    def run() -> None:
        if into:
            config.check_repo_path(into)
        try:
            task_service(request).accept(task_id, attempt=attempt, into=into or None, confirm=confirm == "yes")
        except NeedsConfirmation as needs:
            risky.append(needs)

    response = await _act(request, task_id, run)
    if not risky:
        return response
    which = f"attempt {attempt}" if attempt else "the best attempt"
    return confirm_page(request, heading=f"Accept {which} of task {task_id} anyway?", reasons=risky[0].reasons,
                        action=f"/tasks/{quote(task_id)}/accept", fields={"attempt": attempt, "into": into},
                        button=f"Accept {which} anyway",
                        back=f"/tasks/{quote(task_id)}/review" + (f"?attempt={attempt}" if attempt else ""))


@router.post("/tasks/{task_id}/reject", response_class=HTMLResponse)
async def reject(request: Request, task_id: Text, csrf: Csrf, reason: FormText) -> Response:
    check_csrf(request, csrf)
    return await _act(request, task_id, lambda: task_service(request).reject(task_id, reason), then="review")


@router.post("/tasks/{task_id}/followup", response_class=HTMLResponse)
async def followup(request: Request, task_id: Text, csrf: Csrf, text: FormText) -> Response:
    """More work: a new round of this task, or, of an accepted one, a new task (shown next)."""
    check_csrf(request, csrf)
    made: list[str] = []

    def run() -> None:
        outcome = task_service(request).followup(task_id, text)
        if isinstance(outcome, Task):
            made.append(outcome.id)

    response = await _act(request, task_id, run)
    return redirect(f"/tasks/{quote(made[0])}") if made else response


@router.post("/tasks/{task_id}/retry", response_class=HTMLResponse)
async def retry(request: Request, task_id: Text, csrf: Csrf) -> Response:
    """Run a failed or cancelled task again: a new round, the earlier ones kept."""
    check_csrf(request, csrf)
    return await _act(request, task_id, lambda: task_service(request).retry(task_id))


# ------------------------------------------------------------------ review


@router.get("/tasks/{task_id}/review", response_class=HTMLResponse)
async def review(request: Request, task_id: Text, attempt: Annotated[int | None, Query(ge=1, le=10_000)] = None,
                 ws: Annotated[str | None, Query(max_length=8)] = None,
                 files: Annotated[int, Query(ge=1, le=10_000_000)] = 1) -> HTMLResponse:
    """The review of an attempt's diff (the best-ranked's unless ``attempt``), listing its files
    from number ``files`` on (a page lists :data:`diffview.PAGE_FILES`)."""
    return await _review_page(request, task_id, attempt, ws == "hide", first=files)


async def _review_page(request: Request, task_id: str, attempt: int | None, hide_ws: bool, *, status: int = 200,
                       error: str | None = None, first: int = 1) -> HTMLResponse:
    return await asyncio.to_thread(_review_page_now, request, task_id, attempt, hide_ws, status, error, first)


def _review_page_now(request: Request, task_id: str, attempt: int | None, hide_ws: bool, status: int,
                     error: str | None, first: int = 1) -> HTMLResponse:
    service = task_service(request)
    task = detail(service, task_id)
    shared = {"task": task, "conversation": taskview.conversation(service, task_id),
              "rejections": [r for r in task.reviews if r.verdict is Verdict.REJECTED],
              "next": taskview.next_steps(service, task), "progress": service.figures(task, task.runs),
              "hide_ws": hide_ws, "error": error}
    try:
        chosen = service.chosen_run(task_id, attempt)
        ranked = service.round_runs(task_id)
    except ErrandError as missing:
        return page(request, "review.html", status_of(missing), **shared, files=[], attempts=[], chosen=None,
                    evidence=None, error=error or missing.message)
    patch = chosen.outcome.patch if chosen.outcome else ""
    files = diffview.parse(patch)
    shown = diffview.budget(diffview.hide_whitespace(files) if hide_ws else files, first)
    attempts = taskview.compare(ranked, [service.evidence(r) for r in ranked])
    evidence = service.evidence(chosen)
    return page(request, "review.html", status, **shared, files=files, shown=shown, attempts=attempts, chosen=chosen,
                tree=diffview.tree(shown.files, shown.first), ranking_rule=RANKING_RULE, limits=diffview,
                evidence=evidence, risks=accept_risks(evidence, patch), needs_into=is_url(task.repo),
                reviewable=_panel(task)["reviewable"], accept_ready=task.state is TaskState.READY_FOR_REVIEW)


@router.get("/tasks/{task_id}/compare", response_class=HTMLResponse)
def compare(request: Request, task_id: Text) -> HTMLResponse:
    """The round's attempts in columns: the ranking's reasons and how ties are broken, then
    each file any attempt changed, with every attempt's change to it side by side."""
    service = task_service(request)
    task = detail(service, task_id)
    try:
        ranked = service.round_runs(task_id)
    except ErrandError as missing:
        return page(request, "compare.html", status_of(missing), task=task, attempts=[], matrix=[],
                    ranking_rule=RANKING_RULE, ties=[], error=missing.message)
    attempts = taskview.compare(ranked, [service.evidence(r) for r in ranked])
    return page(request, "compare.html", task=task, attempts=attempts, matrix=taskview.file_matrix(attempts),
                ranking_rule=RANKING_RULE, ties=taskview.ties(attempts))


@router.get("/tasks/{task_id}/context")
async def context(request: Request, task_id: Text, path: Annotated[str, Query(min_length=1, max_length=4096)],
                  start: Annotated[int, Query(ge=1, le=10_000_000)], end: Annotated[int, Query(ge=1, le=10_000_000)],
                  attempt: Annotated[int | None, Query(ge=1, le=10_000)] = None) -> JSONResponse:
    """Lines ``start``..``end`` of a changed file as the task's base has it, highlighted: what the
    review page's "show more" buttons add around a hunk. Only a file the attempt changed (and
    that existed before it) can be read, and at most :data:`CONTEXT_LIMIT` lines at a time."""
    if end < start or end - start >= CONTEXT_LIMIT:
        raise ConfigError(f"ask for 1 to {CONTEXT_LIMIT} lines (start {start}, end {end})", code="bad_range")
    total, lines = await asyncio.to_thread(_context_now, request, task_id, attempt, path, start, end)
    return JSONResponse({"path": path, "total": total,
                         "lines": [{"old": line.old, "html": str(line.html)} for line in lines]})


def _context_now(request: Request, task_id: str, attempt: int | None, path: str, start: int,
                 end: int) -> tuple[int, list[diffview.Line]]:
    service = task_service(request)
    task = detail(service, task_id)
    run = service.chosen_run(task_id, attempt)
    changed = diffview.parse(run.outcome.patch if run.outcome else "")
    if not any((file.old_path or file.path) == path and file.has_base for file in changed):
        raise ConfigError(f"{path!r} is not a file this attempt changed that existed before it", code="not_in_diff")
    return diffview.base_lines(path, taskview.base_text(task, path), start, end)


@router.get("/tasks/{task_id}/review/file", response_class=HTMLResponse)
async def review_file(request: Request, task_id: Text, number: Annotated[int, Query(ge=1, le=10_000_000)],
                      attempt: Annotated[int | None, Query(ge=1, le=10_000)] = None,
                      ws: Annotated[str | None, Query(max_length=8)] = None) -> HTMLResponse:
    """File ``number`` (1-based, in the diff's order) of an attempt's diff, drawn as the review
    page draws an open file, up to :data:`diffview.FILE_LINES` lines: what a closed file, or one
    past the page's budget, loads when it is opened."""
    file, left_out = await asyncio.to_thread(_review_file_now, request, task_id, attempt, number, ws == "hide")
    return page(request, "_diff_file.html", f=file, hide_ws=ws == "hide", left_out=left_out, task_id=task_id,
                attempt=attempt, number=number)


def _review_file_now(request: Request, task_id: str, attempt: int | None, number: int,
                     hide_ws: bool) -> tuple[diffview.FileDiff, int]:
    service = task_service(request)
    detail(service, task_id)
    run = service.chosen_run(task_id, attempt)
    files = diffview.parse(run.outcome.patch if run.outcome else "")
    if number > len(files):
        raise ConfigError(f"attempt {run.attempt} changed {len(files)} file(s): there is no file {number}",
                          code="not_in_diff")
    file = files[number - 1]
    return diffview.one_file(diffview.hide_whitespace([file])[0] if hide_ws else file)


@router.get("/assets/code.css")
def code_css(request: Request) -> Response:
    css: str = request.app.state.code_css
    return Response(css, media_type="text/css", headers={"Cache-Control": "max-age=3600"})


# ------------------------------------------------------------------ sandboxes


@router.get("/sandboxes", response_class=HTMLResponse)
async def sandboxes(request: Request) -> HTMLResponse:
    listed = []
    for live in await taskview.task_sandboxes():
        try:
            sandbox = await AsyncSandbox.from_id(live.info.id)
        except ErrandError:
            continue  # it ended while we looked
        try:
            egress = (await sandbox.egress_log())[-EGRESS_SHOWN:]
        finally:
            await sandbox.close()
        listed.append({"info": live.info, "usage": live.usage, "egress": egress})
    return page(request, "sandboxes.html", sandboxes=listed)


@router.post("/sandboxes/{sandbox_id}/terminate", response_class=HTMLResponse)
async def terminate(request: Request, sandbox_id: Text, csrf: Annotated[str, Form(alias="csrf_token")],
                    confirm: Confirmed = None) -> Response:
    check_csrf(request, csrf)
    try:
        sandbox = await AsyncSandbox.from_id(sandbox_id)
        if confirm != "yes":
            await sandbox.close()  # a look only, until the person confirms
            return await _confirm_terminate(request, sandbox.id)
        await sandbox.terminate()
    except ErrandError as error:
        return page(request, "sandboxes.html", status_of(error), sandboxes=[], error=error.message)
    return redirect("/sandboxes")


async def _confirm_terminate(request: Request, sandbox_id: str) -> HTMLResponse:
    labels = next((info.labels for info in await AsyncSandbox.list() if info.id == sandbox_id), {})
    task = labels.get("task")
    return confirm_page(request, heading=f"Terminate {sandbox_id}?", action=f"/sandboxes/{quote(sandbox_id)}/terminate",
                        reasons=["Every process in it is killed, and what it left on the host is removed."]
                        + ([f"It runs task {task}: that run ends, and the task says a person terminated its "
                            "sandbox."] if task else []),
                        button=f"Terminate {sandbox_id}", back="/sandboxes")


# ------------------------------------------------------------------ login


@router.get("/login", response_class=HTMLResponse)
def login_page(request: Request, next: Annotated[str, Query(max_length=2048)] = "/") -> HTMLResponse:  # noqa: A002
    return page(request, "login.html", next=local_path(next))


@router.post("/login", response_class=HTMLResponse)
def login(request: Request, csrf: Csrf, token: Annotated[str, Form(max_length=4096)],
          next: Annotated[str, Form(max_length=2048)] = "/") -> Response:  # noqa: A002
    check_csrf(request, csrf)
    keys: Keys = request.app.state.keys
    if not keys.token_matches(token) or keys.session is None:
        return page(request, "login.html", 401, next=local_path(next), error="that is not this server's token")
    response = redirect(local_path(next))
    response.set_cookie(SESSION_COOKIE, keys.session, httponly=True, samesite="lax", path="/")
    return response


@router.post("/logout", response_class=HTMLResponse)
def logout(request: Request, csrf: Csrf) -> Response:
    check_csrf(request, csrf)
    response = redirect("/login")
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response


def local_path(target: str) -> str:
    """Only a path on this server: never ``//elsewhere`` or a full URL (no open redirect)."""
    if not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target
