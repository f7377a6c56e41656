#!/usr/bin/env python3
"""errand task benchmarks: how fast a task gets going, and what review evidence costs.

    .venv/bin/python benchmarks/tasks.py [--files N] [--runs N] [--json PATH]

A repository of ``--files`` files (10,000 by default) with a failing test and an
``errand.toml`` that has a setup step (so its environment is cached after the first task)
and a test command. A warm-up task fills the environment cache; then each of ``--runs``
tasks is submitted through the task service (the ``errand run`` path) to a local engine in
this process, whose model is a scripted one that records when it is first asked.

Figures (p50 / p95 / max, milliseconds):

1. submit → first model request: from the call that queues the task to the first request
   its agent makes — intake checks, the claim, the working copy, the sandbox. Broken down
   by the events each task records.
2. diff and evidence beyond the test command: from the agent's exit to the task being ready
   for review, minus the seconds the test command itself ran on the result.

Targets (issue 4): (1) p50 ≤ 1000 ms; (2) p50 ≤ 500 ms. The script reports, it does not
assert. It removes what it made (its errand home lives in a temporary directory).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

CALC = "def add(a, b):\n    return a - b\n"
TEST = "from calc import add\n\nassert add(2, 3) == 5\nprint('1 passed in 0.01s')\n"
TOML = '[setup]\ncommands = ["mkdir -p /opt/bench && echo ready > /opt/bench/marker"]\n' \
       '[test]\ncommand = "python3 test_calc.py"\n'


def make_repo(root: Path, files: int) -> None:
    root.mkdir(parents=True)
    per_dir = 100
    for index in range(files):
        directory = root / "src" / f"pkg{index // per_dir:03d}"
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"module{index % per_dir:03d}.py").write_text(f"VALUE_{index} = {index}\n")
    (root / "calc.py").write_text(CALC)
    (root / "test_calc.py").write_text(TEST)
    (root / "errand.toml").write_text(TOML)
    env = {**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}
    for args in (["init", "-q", "-b", "main"], ["add", "-A"],
                 ["-c", "user.name=bench", "-c", "user.email=bench@localhost", "commit", "-q", "-m", "init"]):
        subprocess.run(["git", *args], cwd=root, env=env, check=True)


def percentiles(values: list[float]) -> str:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return f"{statistics.median(ordered):8.1f} {p95:8.1f} {ordered[-1]:8.1f}"


async def one_task(service: Any, store: Any, repo: Path, script: Path, first_requests: list[float]) -> dict[str, float]:
    from errand.tasks.lifecycle import TaskState

    start_wall = time.time()
    start = time.perf_counter()
    task = await asyncio.to_thread(service.submit, "Make test_calc.py pass", repo=repo, model=f"scripted:{script}")
    submitted = time.perf_counter()
    while (await asyncio.to_thread(store.get_task, task.id)).state not in (TaskState.READY_FOR_REVIEW,
                                                                          TaskState.FAILED):
        await asyncio.sleep(0.01)
    state = store.get_task(task.id).state
    if state is not TaskState.READY_FOR_REVIEW:
        raise SystemExit(f"task {task.id} ended {state}: {[e.data for e in store.events(task.id)][-3:]}")
    first = min(t for t in first_requests if t >= start)
    events = {e.kind: e.time for e in reversed(store.events(task.id, limit=100_000))}  # first of each kind
    exits = [e.time for e in store.events(task.id, kinds=["exit"])]
    [run] = store.runs(task.id)
    evidence = run.result["evidence"]
    test_seconds = evidence["tests_after"]["seconds"]
    return {
        "submit_to_first_request": (first - start) * 1000,
        "intake": (submitted - start) * 1000,
        "claim": (events["round_started"] - start_wall) * 1000 - (submitted - start) * 1000,
        "round_started_to_first_request": (first - start) * 1000
        - (events["round_started"] - start_wall) * 1000,
        "evidence_beyond_tests": ((events["ready_for_review"] - exits[-1]) - test_seconds) * 1000,
        "test_command": test_seconds * 1000,
    }


class FirstRequestModel:
    """The scripted fix, noting when it is first asked (one model per attempt, tasks one at a time)."""

    def __init__(self, script: Path, first_requests: list[float]) -> None:
        from errand.models import ScriptedModel

        self.inner = ScriptedModel.from_file(script)
        self.name = "bench"
        self.first_requests = first_requests
        self.asked = False

    async def complete(self, messages: Any, tools: Any) -> Any:
        if not self.asked:
            self.asked = True
            self.first_requests.append(time.perf_counter())
        return await self.inner.complete(messages, tools)


async def bench(files: int, runs: int) -> dict[str, list[float]]:
    from errand.tasks.engine import LocalEngine
    from errand.tasks.service import TaskService
    from errand.tasks.store import TaskStore

    work = Path(os.environ["ERRAND_HOME"]).parent
    repo = work / "repo"
    started = time.perf_counter()
    make_repo(repo, files)
    print(f"made a repository of {files} files in {time.perf_counter() - started:.1f}s", flush=True)
    script = work / "script.json"
    script.write_text(json.dumps([
        {"tool_calls": [{"name": "edit_file", "arguments": {"path": "calc.py", "old": "return a - b",
                                                            "new": "return a + b"}}]},
        {"tool_calls": [{"name": "finish", "arguments": {"summary": "add adds", "assumptions": []}}]}]))
    store = TaskStore.open()
    service = TaskService(store)
    seen: list[float] = []
    engine = LocalEngine(store, concurrency=1, poll_interval=0.02,
                         models=lambda _spec, _index: FirstRequestModel(script, seen))
    stop = asyncio.Event()
    serving = asyncio.create_task(engine.serve(stop=stop))
    results: dict[str, list[float]] = {}
    try:
        print("warm-up task (sets up and caches the environment) ...", flush=True)
        await one_task(service, store, repo, script, seen)
        for n in range(runs):
            figures = await one_task(service, store, repo, script, seen)
            for key, value in figures.items():
                results.setdefault(key, []).append(value)
            print(f"  run {n + 1}/{runs}: first request {figures['submit_to_first_request']:.0f} ms, "
                  f"evidence beyond tests {figures['evidence_beyond_tests']:.0f} ms", flush=True)
    finally:
        stop.set()
        await serving
        store.close()
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--json", type=Path)
    options = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="errand-bench-tasks-"))
    os.environ["ERRAND_HOME"] = str(work / "home")
    os.environ.pop("ERRAND_DATABASE_URL", None)
    try:
        results = asyncio.run(bench(options.files, options.runs))
    except KeyboardInterrupt:
        return 130
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\nerrand task benchmark: {options.files} files, {options.runs} runs, {os.cpu_count()} cores, "
          f"Python {sys.version.split()[0]}")
    print(f"{'figure (ms)':44} {'p50':>8} {'p95':>8} {'max':>8}   target")
    rows = [("submit → first model request", "submit_to_first_request", "p50 ≤ 1000"),
            ("  intake (checks, insert)", "intake", ""),
            ("  claim (queued → round started)", "claim", ""),
            ("  working copy + sandbox → first request", "round_started_to_first_request", ""),
            ("diff + evidence beyond the test command", "evidence_beyond_tests", "p50 ≤ 500"),
            ("  (the test command itself)", "test_command", "")]
    for label, key, target in rows:
        print(f"{label:44} {percentiles(results[key])}   {target}")
    if options.json:
        options.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
