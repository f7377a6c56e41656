"""The web UI's evaluation pages: the runs under the server's eval directory, one run's
figures and instances, and one attempt's grade, diff and trajectory.

The runs are files ``errand eval`` wrote (see :mod:`errand.eval.runs`); the pages only
read them. A run, instance or attempt named in a URL is looked up among the directory's
entries (:mod:`errand.eval.runview`), so a name cannot reach outside it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from errand import _settings
from errand.eval.errors import EvalError
from errand.eval.runview import find_run, list_runs, read_run
from errand.server.config import ServerConfig
from errand.server.eval_report import attempt_parts, run_parts, shown
from errand.server.schemas import Text
from errand.server.ui import error_page, page, templates

__all__ = ["router"]

router = APIRouter(include_in_schema=False)
templates.env.filters["shown"] = shown  # the eval partials show text from run files with it


def runs_root(request: Request) -> Path:
    config: ServerConfig = request.app.state.config
    return config.eval_runs or _settings.eval_runs_dir()


@router.get("/eval", response_class=HTMLResponse)
async def eval_runs(request: Request) -> HTMLResponse:
    root = runs_root(request)
    runs = await asyncio.to_thread(list_runs, root)
    return page(request, "eval.html", runs=runs, root=root, nav="eval")


@router.get("/eval/{run_name}", response_class=HTMLResponse)
async def eval_run(request: Request, run_name: Text) -> HTMLResponse:
    try:
        run = await asyncio.to_thread(lambda: read_run(find_run(runs_root(request), run_name)))
    except EvalError as missing:
        return error_page(request, 404, missing.message)
    return page(request, "eval_run.html", **run_parts(run), nav="eval")


@router.get("/eval/{run_name}/{instance_dir}/{label}", response_class=HTMLResponse)
async def eval_attempt(request: Request, run_name: Text, instance_dir: Text, label: Text) -> HTMLResponse:
    def read() -> dict[str, Any]:
        run = read_run(find_run(runs_root(request), run_name))
        parts = attempt_parts(run.attempt(instance_dir, label))
        return {"run": run, "parts": parts, "attempt": parts["attempt"], "grade": parts["grade"]}

    try:
        parts = await asyncio.to_thread(read)
    except EvalError as missing:
        return error_page(request, 404, missing.message)
    return page(request, "eval_attempt.html", **parts, nav="eval")
