"""The web UI's memory pages: every project's memories, one memory, and a person's changes to them.

Every change is a CSRF-checked form that goes through the same MemoryStore as
the API and ``errand memory``; after it the browser goes back to the page it
came from. A memory whose project is a local checkout is checked against that
checkout's current tree, and marked stale when a file or symbol it cites is gone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlencode

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import HTMLResponse, Response

from errand.errors import ErrandError
from errand.memory import Kind, Memory, MemoryStore, Status
from errand.memory.citations import TreeIndex, check
from errand.server.api_memory import MemoryId, MemoryIn, add_memory_for, memory_store
from errand.server.problems import status_of
from errand.server.schemas import Text
from errand.server.security import check_csrf
from errand.server.ui import Confirmed, Csrf, FormText, confirm_page, local_path, page, redirect

__all__ = ["router"]

router = APIRouter(include_in_schema=False)
PAGE_SIZE = 50
Back = Annotated[str, Form(max_length=2048)]
ProjectQuery = Annotated[Text | None, Query(max_length=4096)]


def stale_reasons(memories: Sequence[Memory]) -> dict[int, tuple[str, ...]]:
    """Why each memory's citations no longer hold in its project's checkout (local projects only)."""
    trees: dict[str, TreeIndex | None] = {}
    reasons: dict[int, tuple[str, ...]] = {}
    for memory in memories:
        if not memory.citations:
            continue
        if memory.project not in trees:
            root = Path(memory.project)
            trees[memory.project] = TreeIndex(root) if root.is_absolute() and root.is_dir() else None
        tree = trees[memory.project]
        if tree is not None and (found := check(memory.citations, tree)):
            reasons[memory.id] = found
    return reasons


def _choice(value: str | None, allowed: type[Status] | type[Kind]) -> str | None:
    return value if value in {member.value for member in allowed} else None


@router.get("/memory", response_class=HTMLResponse)
def memory_list(request: Request, project: ProjectQuery = None,
                status: Annotated[str | None, Query(max_length=32)] = None,
                kind: Annotated[str | None, Query(max_length=32)] = None,
                offset: Annotated[int, Query(ge=0, le=2**40)] = 0) -> HTMLResponse:
    return _list_page(request, {"project": project or "", "status": _choice(status, Status) or "",
                                "kind": _choice(kind, Kind) or ""}, offset)


def _list_page(request: Request, filters: dict[str, str], offset: int, *, status: int = 200,
               error: str | None = None, form: dict[str, Any] | None = None) -> HTMLResponse:
    store = memory_store(request)
    found = store.list_memories(filters["project"] or None, status=filters["status"] or None,
                                kind=filters["kind"] or None, limit=PAGE_SIZE, offset=offset)
    chosen = {key: value for key, value in filters.items() if value}
    more = urlencode({**chosen, "offset": offset + PAGE_SIZE}) if len(found) == PAGE_SIZE else None
    return page(request, "memory.html", status, memories=found, stale=stale_reasons(found),
                uses=store.use_counts([m.id for m in found]),
                projects=store.projects(), filters=filters, filtered=bool(chosen), more=more,
                statuses=list(Status), kinds=list(Kind), error=error,
                form=form or {"kind": Kind.FACT.value, "repo": filters["project"]})


@router.get("/memory/{memory_id}", response_class=HTMLResponse)
def memory_page(request: Request, memory_id: MemoryId) -> HTMLResponse:
    return _one_page(request, memory_id)


def _one_page(request: Request, memory_id: int, *, status: int = 200, error: str | None = None) -> HTMLResponse:
    store = memory_store(request)
    try:
        memory = store.get(memory_id)
    except ErrandError as missing:
        return _list_page(request, {"project": "", "status": "", "kind": ""}, 0, status=status_of(missing),
                          error=missing.message)
    memories = [memory] + [store.get(linked) for linked in (memory.supersedes, memory.superseded_by)
                           if linked is not None]
    return page(request, "memory_one.html", status, memory=memories[0], related=memories[1:],
                uses=store.use_counts([m.id for m in memories]),
                stale=stale_reasons(memories), kinds=list(Kind), error=error)


@router.post("/memory", response_class=HTMLResponse)
def add_memory(request: Request, csrf: Csrf, repo: Annotated[Text, Form(max_length=4096)], text: FormText,
               kind: Annotated[Kind, Form()] = Kind.FACT, proposed: Annotated[bool, Form()] = False) -> Response:
    check_csrf(request, csrf)
    try:
        memory = add_memory_for(request, MemoryIn(repo=repo, text=text, kind=kind, proposed=proposed, supersedes=None))
    except ErrandError as error:
        form = {"repo": repo, "text": text, "kind": kind.value, "proposed": proposed}
        return _list_page(request, {"project": "", "status": "", "kind": ""}, 0, status=status_of(error),
                          error=error.message, form=form)
    return redirect(f"/memory/{memory.id}")


def _change(request: Request, memory_id: int, back: str, change: Callable[[MemoryStore], object]) -> Response:
    try:
        change(memory_store(request))
    except ErrandError as error:
        return _one_page(request, memory_id, status=status_of(error), error=error.message)
    return redirect(local_path(back))


@router.post("/memory/{memory_id}/remove", response_class=HTMLResponse)
def remove(request: Request, memory_id: MemoryId, csrf: Csrf, back: Back = "/memory",
           confirm: Confirmed = None) -> Response:
    check_csrf(request, csrf)
    if confirm != "yes":
        memory = memory_store(request).get(memory_id)
        return confirm_page(request, heading=f"Remove memory {memory.id} for good?",
                            action=f"/memory/{memory.id}/remove",
                            reasons=[f"“{memory.text}” is deleted; an agent is never given it again. Archive keeps "
                                     "it instead."], button=f"Remove memory {memory.id}", back=local_path(back),
                            fields={"back": back})
    if back.rstrip("/") == f"/memory/{memory_id}":
        back = "/memory"  # its own page is gone with it
    return _change(request, memory_id, back, lambda store: store.remove(memory_id))


@router.post("/memory/{memory_id}/edit", response_class=HTMLResponse)
def edit(request: Request, memory_id: MemoryId, csrf: Csrf, text: FormText, kind: Annotated[Kind, Form()],
         back: Back = "/memory") -> Response:
    check_csrf(request, csrf)
    return _change(request, memory_id, back, lambda store: store.edit(memory_id, text=text, kind=kind))


_MOVES: dict[str, Callable[[MemoryStore, int], Memory]] = {
    "approve": MemoryStore.approve, "reject": MemoryStore.reject,
    "archive": lambda store, memory_id: store.archive(memory_id),
}


@router.post("/memory/{memory_id}/{move}", response_class=HTMLResponse)
def change_status(request: Request, memory_id: MemoryId, move: Literal["approve", "reject", "archive"], csrf: Csrf,
                  back: Back = "/memory") -> Response:
    """Approve or reject a proposal, or archive a memory."""
    check_csrf(request, csrf)
    return _change(request, memory_id, back, lambda store: _MOVES[move](store, memory_id))
