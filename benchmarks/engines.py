#!/usr/bin/env python3
"""errand engine benchmark: a queue of tasks through the local engine, on SQLite and on PostgreSQL.

    .venv/bin/python benchmarks/engines.py [--tasks N] [--concurrency N] [--json PATH]

A tiny repository with a failing test and an ``errand.toml`` whose setup step is cached by a
warm-up task; then ``--tasks`` tasks (100 by default) are submitted at once through the task
service and a local engine in this process (``--concurrency`` at a time, 2 by default) runs
them with a scripted model (edit, finish). Once on SQLite, once on PostgreSQL — a throw-away
PostgreSQL 15 cluster in a temporary directory, as the tests start one (skipped, and said,
when its programs are not installed).

Figures per store: throughput (tasks from the first submission to the last one ready, per
second) and submit → ready for review p50 / p95 / max (ms), a task's whole life in the queue
and its round. The Temporal engine's row is not here: its engine is not built (see the
README's deployment notes). The script reports, it does not assert, and removes what it made.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
sys.path.append(str(Path(__file__).parent.parent / "tests"))  # its postgres.py: the tests' throw-away cluster

from tasks import make_repo


def percentiles(values: list[float]) -> tuple[float, float, float]:
    ordered = sorted(values)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))], ordered[-1]


async def wait_ready(store: Any, task_ids: list[str]) -> None:
    from errand.tasks.lifecycle import TaskState

    pending = set(task_ids)
    while pending:
        for task_id in list(pending):
            state = (await asyncio.to_thread(store.get_task, task_id)).state
            if state is TaskState.FAILED:
                raise SystemExit(f"task {task_id} failed: {[e.data for e in store.events(task_id)][-3:]}")
            if state is TaskState.READY_FOR_REVIEW:
                pending.discard(task_id)
        await asyncio.sleep(0.05)


async def bench(url: str, repo: Path, script: Path, tasks: int, concurrency: int) -> dict[str, Any]:
    from errand.models import ScriptedModel
    from errand.tasks.engine import LocalEngine
    from errand.tasks.service import TaskService
    from errand.tasks.store import TaskStore

    store = TaskStore.open(url)
    service = TaskService(store)
    engine = LocalEngine(store, concurrency=concurrency, poll_interval=0.02, memory=None,
                         models=lambda _spec, _index: ScriptedModel.from_file(script))
    stop = asyncio.Event()
    serving = asyncio.create_task(engine.serve(stop=stop))
    submit = lambda: service.submit("Make test_calc.py pass", repo=repo, model=f"scripted:{script}").id
    try:
        await wait_ready(store, [await asyncio.to_thread(submit)])  # warm-up: sets up and caches the environment
        started = time.time()
        task_ids = [await asyncio.to_thread(submit) for _ in range(tasks)]
        await wait_ready(store, task_ids)
        finished = time.time()
    finally:
        stop.set()
        await serving
    latencies = []
    for task_id in task_ids:
        created = store.get_task(task_id).created_at
        [ready] = store.events(task_id, kinds=["ready_for_review"])
        latencies.append((ready.time - created) * 1000)
    store.close()
    return {"tasks": tasks, "seconds": finished - started, "throughput": tasks / (finished - started),
            "submit_to_ready_ms": latencies}


def stores(work: Path) -> list[tuple[str, str | None, str]]:
    """(name, URL or None when it cannot run here, why not)."""
    import postgres

    rows: list[tuple[str, str | None, str]] = [("local engine, SQLite", f"sqlite:///{work / 'errand.db'}", "")]
    reason = postgres.missing()
    rows.append(("local engine, PostgreSQL", None if reason else "postgresql", reason or ""))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--json", type=Path)
    options = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="errand-bench-engines-"))
    os.environ["ERRAND_HOME"] = str(work / "home")
    os.environ.pop("ERRAND_DATABASE_URL", None)
    import postgres

    cluster = None
    results: dict[str, Any] = {}
    try:
        repo = work / "repo"
        make_repo(repo, 10)
        script = work / "script.json"
        script.write_text(json.dumps([
            {"tool_calls": [{"name": "edit_file", "arguments": {"path": "calc.py", "old": "return a - b",
                                                                "new": "return a + b"}}]},
            {"tool_calls": [{"name": "finish", "arguments": {"summary": "add adds", "assumptions": []}}]}]))
        for name, url, why in stores(work):
            if url is None:
                print(f"{name}: skipped ({why})", flush=True)
                continue
            if url == "postgresql":
                cluster = postgres.start()
                url = cluster.url(cluster.create_database())
            print(f"{name}: {options.tasks} tasks ...", flush=True)
            results[name] = asyncio.run(bench(url, repo, script, options.tasks, options.concurrency))
    except KeyboardInterrupt:
        return 130
    finally:
        if cluster is not None:
            postgres.stop(cluster)
        shutil.rmtree(work, ignore_errors=True)
    print(f"\nerrand engine benchmark: {options.tasks} queued tasks, concurrency {options.concurrency}, "
          f"{os.cpu_count()} cores, Python {sys.version.split()[0]}")
    print(f"{'engine, store':28} {'tasks/s':>8} {'p50 ms':>9} {'p95 ms':>9} {'max ms':>9}   (submit → ready)")
    for name, figures in results.items():
        p50, p95, top = percentiles(figures["submit_to_ready_ms"])
        print(f"{name:28} {figures['throughput']:8.2f} {p50:9.0f} {p95:9.0f} {top:9.0f}")
    print("Temporal, two workers        not built (the engine is not written yet)")
    if options.json:
        options.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
