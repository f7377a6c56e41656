"""The server as one ASGI application: API, live events, web UI, and the local engine.

``create_app`` wires the parts; its lifespan opens the task store and, unless
told not to, runs the engine it names (:mod:`errand.tasks.engines.choice`) in the same
event loop: the local engine, so ``errand serve`` alone runs tasks as ``errand
worker`` does, or the part of another engine that hands tasks to its workers. When
another worker already serves this errand home, the server says so and keeps
asking, taking over when that worker exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from errand import __version__
from errand.memory import MemoryStore
from errand.server import (
    api_forge,
    api_memory,
    api_sandboxes,
    api_tasks,
    diffview,
    operator,
    problems,
    ui,
    ui_eval,
    ui_forge,
    ui_memory,
)
from errand.server.config import ServerConfig
from errand.server.live import Hub
from errand.server.security import Guard, Keys
from errand.tasks.engines.choice import server_engine
from errand.tasks.engines.workers import EngineBusy
from errand.tasks.service import TaskService
from errand.tasks.store.tasks import TaskStore

__all__ = ["create_app"]

log = logging.getLogger("errand.server")
ENGINE_RETRY = 5.0


def create_app(config: ServerConfig | None = None, *, database_url: str | None = None) -> FastAPI:
    """The application for ``config``; the store is ``database_url`` (default: errand's own)."""
    config = config or ServerConfig()
    keys = Keys(config.token)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        store = await asyncio.to_thread(TaskStore.open, database_url)
        # One project memory for the pages, the reviews and the engine, on the task store's database.
        app.state.memories = memories = MemoryStore(store.engine)
        app.state.service = TaskService(store, memory=memories)
        app.state.hub = Hub(store, config.poll_interval)
        app.state.metrics = operator.registry_for(store)
        stop = asyncio.Event()
        engine = None
        if config.run_engine:
            app.state.engine_status = operator.EngineStatus.STARTING
            engine = asyncio.create_task(_run_engine(app, store, memories, config, stop))
        try:
            yield
        finally:
            stop.set()
            await app.state.hub.close()
            if engine is not None:
                await engine
            memories.close()
            store.close()

    app = FastAPI(title="errand", version=__version__, lifespan=lifespan, docs_url=None, redoc_url=None,
                  description="Background coding agents in sandboxes: tasks, their live events, diffs, evidence "
                              "and reviews, the sandboxes they run in, and project memory. Errors are "
                              "application/problem+json with a stable `code`.")
    app.state.config = config
    app.state.keys = keys
    app.state.engine_status = operator.EngineStatus.OFF
    app.state.code_css = diffview.css()
    problems.install(app, html=ui.error_page)
    app.include_router(api_tasks.router)
    app.include_router(api_sandboxes.router)
    app.include_router(api_memory.router)
    app.include_router(api_forge.router)
    app.include_router(operator.router)
    app.include_router(ui.router)
    app.include_router(ui_memory.router)
    app.include_router(ui_eval.router)
    app.include_router(ui_forge.router)
    app.mount("/static", StaticFiles(directory=Path(__file__).parent / "static"), name="static")
    app.add_middleware(Guard, config=config, keys=keys)
    return app


async def _run_engine(app: FastAPI, store: TaskStore, memories: MemoryStore, config: ServerConfig,
                      stop: asyncio.Event) -> None:
    engine = server_engine(config.engine, store, memories, concurrency=config.concurrency, temporal=config.temporal)
    warned = False
    while not stop.is_set():
        try:
            await engine.serve(stop=stop, ready=lambda: _engine_ready(app, config))
            return
        except EngineBusy as busy:
            _engine_is(app, operator.EngineStatus.REFUSED, busy.message)
            if not warned:
                log.warning("%s; this server runs no tasks until it exits", busy.message)
                warned = True
        except Exception as error:  # the engine must not take the API down with it
            _engine_is(app, operator.EngineStatus.RESTARTING, f"{type(error).__name__}: {error}"[:300])
            log.exception("the task engine stopped; restarting it")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), ENGINE_RETRY)


def _engine_ready(app: FastAPI, config: ServerConfig) -> None:
    _engine_is(app, operator.EngineStatus.RUNNING)
    what = f"runs tasks {config.concurrency} at a time" if config.engine == "local" else "hands tasks to its workers"
    log.info("the %s engine %s", config.engine, what)


def _engine_is(app: FastAPI, status: operator.EngineStatus, reason: str = "") -> None:
    app.state.engine_status, app.state.engine_reason = status, reason
