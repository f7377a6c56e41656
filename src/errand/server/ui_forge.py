"""The web's forge pages: the backlog batches ``errand run --issues`` started, and one batch's
progress, issue by issue — queued, running, waiting for a person, ready, pull request opened,
and the CI on errand's pushed commit — each with its links (the issue, the task, the pull
request, the checks). The same rows ``errand forge ls --batch`` prints (:mod:`errand.forge.progress`).

Links to the forge are shown only when they are http(s): a check's ``target_url`` is written by
whatever CI reported it, and a ``javascript:`` one must not become a link here.
"""

from __future__ import annotations

import asyncio
import re
from typing import Annotated, Any
from urllib.parse import urlsplit

from fastapi import APIRouter, Path, Request
from fastapi.responses import HTMLResponse

from errand.forge.links import LinkStore
from errand.forge.progress import LABELS, counts, rows
from errand.server.ui import error_page, page, templates
from errand.tasks.service import TaskService

__all__ = ["router"]

router = APIRouter(include_in_schema=False)
BatchId = Annotated[str, Path(max_length=32)]
_BATCH = re.compile(r"^b-[0-9a-f]{1,16}$")


def _web(url: object) -> str | None:
    text = str(url or "")
    return text if urlsplit(text).scheme in ("http", "https") and urlsplit(text).netloc else None


templates.env.filters["web_url"] = _web


def _links(request: Request) -> tuple[TaskService, LinkStore]:
    service: TaskService = request.app.state.service
    return service, LinkStore(service.engine)


@router.get("/forge", response_class=HTMLResponse)
async def forge_batches(request: Request) -> HTMLResponse:
    service, links = _links(request)

    def read() -> dict[str, Any]:
        batches = links.batches()
        return {"batches": [(batch, count, started, counts(rows(service, links.listed(batch=batch,
                                                                                             limit=count))))
                            for batch, count, started in batches], "labels": LABELS}

    return page(request, "forge.html", **await asyncio.to_thread(read), nav="forge")


@router.get("/forge/batches/{batch_id}", response_class=HTMLResponse)
async def forge_batch(request: Request, batch_id: BatchId) -> HTMLResponse:
    if not _BATCH.match(batch_id):
        return error_page(request, 404, f"{batch_id!r} is not a batch id (they look like b-1a2b3c4d)")
    service, links = _links(request)

    def read() -> dict[str, Any]:
        found = rows(service, links.listed(batch=batch_id, limit=1000))
        return {"rows": found, "counts": counts(found), "labels": LABELS}

    parts = await asyncio.to_thread(read)
    if not parts["rows"]:
        return error_page(request, 404, f"no batch {batch_id} here: `errand run --issues QUERY` starts one")
    return page(request, "forge_batch.html", batch=batch_id, **parts, nav="forge")
