"""``errand worker``: run queued tasks in the foreground, or see or stop the worker serving
this errand home (one per home, held by a lock)."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections.abc import Callable
from typing import Annotated

import typer
from rich.console import Console

from errand import _settings
from errand.cli.events import shown
from errand.cli.tasks import age, console, task_service
from errand.tasks.engines import Served, worker_engine
from errand.tasks.lifecycle import ACTIVE
from errand.tasks.records import RunState
from errand.tasks.service import TaskService
from errand.tasks.store import TaskStore
from errand.tasks.workers import WorkerInfo, running_worker, stop_worker

__all__ = ["worker_app"]


worker_app = typer.Typer(help="Run queued tasks here; or see, or stop, the worker serving this errand home.",
                         rich_markup_mode=None)


@worker_app.callback(invoke_without_command=True)
def worker(
    context: typer.Context,
    concurrency: Annotated[int, typer.Option("--concurrency", metavar="N", min=1, help="Tasks run at once.")] = 2,
    exit_when_idle: Annotated[float | None, typer.Option("--exit-when-idle", metavar="SECONDS",
                                                         help="Exit after this long with nothing to do.")] = None,
    engine_kind: Annotated[str, typer.Option("--engine", metavar="ENGINE", envvar="ERRAND_ENGINE", help=(
        "local (claim tasks from the store) or temporal (take rounds from a Temporal service)."))] = "local",
    temporal: Annotated[str | None, typer.Option("--temporal", metavar="ADDRESS", envvar="ERRAND_TEMPORAL",
                                                 help="The Temporal service, host:port (--engine temporal).")] = None,
) -> None:
    """Run queued tasks in this process until interrupted (one worker per errand home)."""
    if context.invoked_subcommand is not None:
        return
    with task_service() as service:
        assert isinstance(service, TaskService)  # a worker runs on this machine's store
        engine = worker_engine(engine_kind, service.store, concurrency=concurrency, temporal=temporal)

        def banner() -> None:  # once the home is ours: a second worker refuses without one
            Console(stderr=True).print(f"errand worker {engine.worker} ({engine_kind} engine): {concurrency} at a "
                                       f"time, store {service.store.engine.url}", highlight=False)

        asyncio.run(_serve_until_signalled(engine, exit_when_idle, banner))


@worker_app.command("status")
def worker_status(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """Whether a worker serves this errand home, and what it was started with.

    Its pid, since when, how many tasks at a time, the endpoints and key variables
    of its environment, and the tasks it holds."""
    with task_service() as service:
        assert isinstance(service, TaskService)
        info = running_worker()
        held = _held_tasks(service.store, info) if info is not None else []
    home = str(_settings.home())
    if as_json:
        described = {} if info is None else {k: v for k, v in info.to_json().items() if k not in ("keys", "variables")}
        print(json.dumps({"running": info is not None, "home": home, **described,
                          "keys": sorted(info.keys) if info is not None else [], "tasks": held}, indent=2))
        return
    out = console()
    if info is None:
        out.print(f"no worker serves {shown(home, lines=False)}; `errand run` starts one, "
                  "`errand worker` runs one here")
        return
    since = f" for {age(time.time() - info.started_at)}" if info.started_at else ""
    out.print(f"[bold]worker pid {info.pid}[/] serves {shown(home, lines=False)}{since}"
              + (f", {info.concurrency} task(s) at a time" if info.concurrency else ""))
    for name, value in info.base_urls.items():
        out.print(f"  endpoint {name}={shown(value, lines=False)}")
    for described_model in info.models.values():
        out.print(f"  model {shown(described_model, lines=False)}")
    out.print(f"  keys: {', '.join(f'${name}' for name in info.keys) or 'none'}")
    out.print(f"  tasks: {', '.join(held) or 'none'}")


@worker_app.command("stop")
def worker_stop(timeout: Annotated[float, typer.Option("--timeout", metavar="SECONDS",
                                                       help="How long to wait for it to exit.")] = 60.0) -> None:
    """Stop the worker serving this errand home, and wait until it has exited.

    It gets SIGTERM: its sandboxes end and its running tasks are requeued for the next worker."""
    with task_service() as service:
        assert isinstance(service, TaskService)
        info = running_worker()
        held = _held_tasks(service.store, info) if info is not None else []
        stopped = stop_worker(timeout)
    if stopped is None:
        console().print(f"no worker serves {shown(_settings.home(), lines=False)}")
        return
    requeued = f"; requeued {', '.join(held)}" if held else ""
    console().print(f"stopped the worker (pid {stopped.pid}){requeued}")


def _held_tasks(store: TaskStore, info: WorkerInfo) -> list[str]:
    """The active tasks with a run of ``info``'s worker in progress."""
    active = [task for state in sorted(ACTIVE) for task in store.list_tasks(state=state, limit=10_000)]
    return [task.id for task in active
            if any(r.state is RunState.RUNNING and r.worker == info.worker for r in store.runs(task.id))]


async def _serve_until_signalled(engine: Served, exit_when_idle: float | None,
                                 ready: Callable[[], None] | None = None) -> None:
    """SIGINT or SIGTERM stops the worker cleanly: its sandboxes end and its runs are requeued."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    await engine.serve(stop=stop, exit_when_idle=exit_when_idle, ready=ready)
