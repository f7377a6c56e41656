"""``errand worker``: run queued tasks in the foreground, or see or stop the worker serving
this errand home (one per home, held by a lock)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Callable
from typing import Annotated

import typer
from rich.console import Console

from errand import _settings, _startup
from errand.cli.events import shown
from errand.cli.tasks import age, console, task_service
from errand.tasks.engines.choice import Served, reconciler, worker_engine
from errand.tasks.engines.reconcile import Healed
from errand.tasks.engines.workers import WorkerInfo, running_worker, stop_worker
from errand.tasks.lifecycle import ACTIVE, TaskState
from errand.tasks.records import RunState
from errand.tasks.service import TaskService
from errand.tasks.store.tasks import TaskStore

__all__ = ["recover", "worker_app"]


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
    # As errand serve does: a worker started while its database restarts (a machine booting, a
    # deploy) waits up to ERRAND_STORE_RETRY_SECONDS for it, saying so, rather than exiting at once.
    with task_service(patient=True) as service:
        assert isinstance(service, TaskService)  # a worker runs on this machine's store
        with _startup.imports():  # the engine's modules: the sandbox's, the agent's, Temporal's
            engine = worker_engine(engine_kind, service.store, concurrency=concurrency, temporal=temporal)

        def banner() -> None:  # once the home is ours: a second worker refuses without one
            Console(stderr=True).print(f"errand worker {engine.worker} ({engine_kind} engine): {concurrency} at a "
                                       f"time, store {service.engine.url}", highlight=False)

        asyncio.run(_serve_until_signalled(engine, exit_when_idle, banner))


@worker_app.command("status")
def worker_status(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """Whether a worker serves this errand home, and what it was started with.

    Its pid, since when, how many tasks at a time, the endpoints and key variables
    of its environment, and the tasks it holds."""
    with task_service() as service:
        assert isinstance(service, TaskService)
        info = running_worker()
        held = _held_tasks(service, info) if info is not None else []
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


EngineKind = Annotated[str, typer.Option("--engine", metavar="ENGINE", envvar="ERRAND_ENGINE", help=(
    "local (judge runs by the workers' leases) or temporal (by their workflows)."))]
Temporal = Annotated[str | None, typer.Option("--temporal", metavar="ADDRESS", envvar="ERRAND_TEMPORAL",
                                              help="The Temporal service, host:port (--engine temporal).")]


@worker_app.command("stop")
def worker_stop(timeout: Annotated[float, typer.Option("--timeout", metavar="SECONDS",
                                                       help="How long to wait for it to exit.")] = 60.0,
                engine_kind: EngineKind = "local", temporal: Temporal = None) -> None:
    """Stop the worker serving this errand home, and wait until it has exited.

    It gets SIGTERM: its sandboxes end and its running tasks are requeued for the next worker.
    A task it held that nothing would move on (its workflow failed, say) is healed here, as
    `errand recover` would; each task's state afterwards is said as it is."""
    with task_service() as service:
        assert isinstance(service, TaskService)
        info = running_worker()
        held = _held_tasks(service, info) if info is not None else []
        stopped = stop_worker(timeout)
        if stopped is None:
            console().print(f"no worker serves {shown(_settings.home(), lines=False)}")
            return
        kind = "temporal" if info is not None and _temporal_worker(info) else engine_kind
        healed = _heal(service.store, kind, temporal, held) if held else {}
        said = [_after_stop(service, task_id, kind, healed.get(task_id)) for task_id in held]
    console().print(f"stopped the worker (pid {stopped.pid})")
    for line in said:
        console().print(f"  {shown(line)}", highlight=False, soft_wrap=True)


def _temporal_worker(info: WorkerInfo) -> bool:
    """Whether the stopped worker was a Temporal one (its id is this home's task queue)."""
    from errand.tasks.engines.temporal import TemporalSettings

    prefix = os.environ.get("ERRAND_TEMPORAL_QUEUE") or "errand"
    return info.worker == TemporalSettings("", prefix=prefix).worker_queue()


def _heal(store: TaskStore, kind: str, temporal: str | None, task_ids: list[str]) -> dict[str, Healed]:
    if kind == "temporal" and not (temporal or os.environ.get("ERRAND_TEMPORAL")):
        return {}  # without the service's address nobody can say whether a workflow drives them
    healer = reconciler(kind, store, temporal=temporal, grace=0.0)
    return {done.task_id: done for done in asyncio.run(healer.once(task_ids))}


def _after_stop(service: TaskService, task_id: str, kind: str, healed: Healed | None) -> str:
    """What became of a task the stopped worker held, as the store says it now."""
    task = service.get_task(task_id)
    why = f" ({healed.reason})" if healed is not None else ""
    if task.state is TaskState.QUEUED:
        return f"{task_id}: requeued{why}"
    if task.state in ACTIVE and kind == "temporal":
        return (f"{task_id}: {task.state.value}; its workflow takes the round for interrupted and requeues it "
                "(`errand recover --engine temporal` if it stays so)")
    return f"{task_id}: {task.state.value}{why}"


def recover(engine_kind: EngineKind = "local", temporal: Temporal = None,
            grace: Annotated[float | None, typer.Option("--grace", metavar="SECONDS", min=0, help=(
                "Leave alone tasks that changed within this many seconds (default ERRAND_RECONCILE_GRACE, "
                "else 60).")) ] = None,
            as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """Heal what a lost hand-off left orphaned, now (`errand serve` does it every half minute).

    Active tasks whose workflow is missing or failed, runs marked running whose worker holds no
    live lease, a cancelled task's runs nobody ended: requeued, or failed with a reason (shown
    by `errand show`), their working copies on this machine removed. Prints what it healed and why."""
    with task_service() as service:
        assert isinstance(service, TaskService)
        healer = reconciler(engine_kind, service.store, temporal=temporal, grace=grace)
        healed = asyncio.run(healer.once())
    if as_json:
        print(json.dumps([done.to_json() for done in healed], indent=2))
        return
    out = console()
    if not healed:
        out.print("nothing to heal: every active task has something moving it on", style="dim")
    for done in healed:
        runs = f" (runs {', '.join(done.run_ids)})" if done.run_ids and done.state is not done.previous else ""
        out.print(f"{done.task_id}: {done.change()}{runs}: {shown(done.reason)}",
                  highlight=False, soft_wrap=True)


def _held_tasks(service: TaskService, info: WorkerInfo) -> list[str]:
    """The active tasks with a run of ``info``'s worker in progress."""
    active = [task for state in sorted(ACTIVE) for task in service.list_tasks(state=state, limit=10_000)]
    return [task.id for task in active
            if any(r.state is RunState.RUNNING and r.worker == info.worker for r in service.runs(task.id))]


async def _serve_until_signalled(engine: Served, exit_when_idle: float | None,
                                 ready: Callable[[], None] | None = None) -> None:
    """SIGINT or SIGTERM stops the worker cleanly: its sandboxes end and its runs are requeued."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    await engine.serve(stop=stop, exit_when_idle=exit_when_idle, ready=ready)
