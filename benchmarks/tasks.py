#!/usr/bin/env python3
"""errand task benchmarks: a new commit's environment, how fast a task gets going, and what
review evidence costs.

    .venv/bin/python benchmarks/tasks.py [--quick] [--only environments|flow] [--commits N]
        [--rebuilds N] [--files N] [--runs N] [--json PATH]

Environments (issue 28). For a pip project and an npm project, each made here at run time
(a ``pyproject.toml`` built by hatchling with its version from git tags and a pinned test
requirement; a ``package.json`` with a lockfile npm writes, TypeScript and mocha, a build
script), the first setup, then ``--commits`` new commits that change a source file, then
``--rebuilds`` commits that change the lockfile. Each figure is the time from a new commit
to its environment ready for the round's sandboxes: the pristine checkout, errand.toml
read, the key, and the set-up step (for a new source commit: the cached layer found and the
refresh run over it — ``pip install --no-deps -e .``, the build script (a lone ``tsc`` run
incrementally from the build info setup left) — and kept).
Target: a new commit's environment ≤ 2 s p50, set beside the rebuild's time (what the
whole-tree key paid for every commit). ``--quick`` uses projects that need no registry
(setuptools from the image, ``--no-build-isolation``; an npm project with no dependencies
whose build is a node script) and 2 commits: seconds on a quiet machine.

Flow (issue 4). A repository of ``--files`` files (10,000 by default; 200 with ``--quick``)
with a failing test and an ``errand.toml`` that has a setup step and a test command. A
warm-up task fills the environment cache; then each of ``--runs`` tasks is submitted
through the task service (the ``errand run`` path) to a local engine in this process,
whose model is a scripted one that records when it is first asked. Figures: submit → first
model request (target p50 ≤ 1000 ms), and diff and evidence beyond the test command
(target p50 ≤ 500 ms).

The script reports, it does not assert. It removes what it made (its errand home lives in
a temporary directory).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
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


GIT_ENV = {"GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost", *args], cwd=root,
                   env={**os.environ, **GIT_ENV}, check=True, capture_output=True)


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
    from errand.tasks.engines.local import LocalEngine
    from errand.tasks.service import TaskService
    from errand.tasks.store.tasks import TaskStore

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


# ------------------------------------------------------------------ environments


def _pip_project(quick: bool) -> dict[str, str]:
    """A Python project: with ``quick`` setuptools from the image and no registry, else hatchling
    with its version from git tags and a pinned test requirement from the registry."""
    if quick:
        pyproject = ('[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n\n'
                     '[project]\nname = "tally"\nversion = "1.4.0"\n\n[tool.setuptools.packages.find]\n'
                     'where = ["src"]\n')
        setup = ('commands = ["python3 -m venv --system-site-packages --without-pip .venv", '
                 '".venv/bin/python -m pip install --quiet --no-build-isolation --no-deps -e ."]\n')
        requirements = {"requirements-test.txt": "# the tests need nothing beyond the standard library\n"}
    else:
        pyproject = ('[build-system]\nrequires = ["hatchling", "hatch-vcs"]\nbuild-backend = "hatchling.build"\n\n'
                     '[project]\nname = "tally"\ndynamic = ["version"]\nrequires-python = ">=3.9"\n\n'
                     '[tool.hatch.version]\nsource = "vcs"\n\n[tool.hatch.build.hooks.vcs]\n'
                     'version-file = "src/tally/_version.py"\n\n[tool.hatch.build.targets.wheel]\n'
                     'packages = ["src/tally"]\n')
        setup = ('commands = ["python3 -m venv .venv", ".venv/bin/pip install --quiet -e . -r '
                 'requirements-test.txt"]\nnetwork = { registries = ["pip"] }\n')
        requirements = {"requirements-test.txt": "pytest==8.4.2\n"}
    test = ".venv/bin/python -m pytest -q" if not quick else ".venv/bin/python -m unittest -q"
    return {"pyproject.toml": pyproject, "errand.toml": f"[setup]\n{setup}\n[test]\ncommand = \"{test}\"\n",
            ".gitignore": ".venv/\n__pycache__/\n*.egg-info/\nsrc/tally/_version.py\n", **requirements,
            "src/tally/__init__.py": "from tally.core import total\n",
            "src/tally/core.py": "def total(amounts):\n    return round(sum(amounts), 2)\n",
            "tests/test_core.py": "import unittest\n\nfrom tally import total\n\n\nclass Total(unittest.TestCase):\n"
                                  "    def test_cents(self):\n        self.assertEqual(total([0.1, 0.2]), 0.3)\n"}


def _npm_project(quick: bool) -> dict[str, str]:
    """An npm project: with ``quick`` no dependencies and a node build script, else TypeScript and
    mocha from the registry and ``tsc`` as its build."""
    if quick:
        manifest = {"name": "pricing", "version": "2.1.0", "private": True,
                    "scripts": {"build": "node build.js", "test": "node test/price.test.js"}}
        extra = {"build.js": "const fs = require('fs');\nfs.mkdirSync('dist', { recursive: true });\n"
                             "fs.copyFileSync('src/price.js', 'dist/price.js');\n",
                 "src/price.js": "exports.withTax = (cents, rate) => Math.round(cents + cents * rate);\n",
                 "test/price.test.js": "const assert = require('assert');\nconst { withTax } = require('../dist/"
                                       "price');\nassert.strictEqual(withTax(999, 0.0825), 1081);\n"}
    else:
        manifest = {"name": "pricing", "version": "2.1.0", "private": True, "main": "dist/price.js",
                    "scripts": {"build": "tsc -p .", "test": "tsc -p . && mocha test/*.test.js"},
                    "devDependencies": {"mocha": "11.8.0", "typescript": "5.9.3"}}
        extra = {"tsconfig.json": json.dumps({"compilerOptions": {"target": "ES2020", "module": "commonjs",
                                                                  "strict": True, "outDir": "dist", "rootDir": "src"},
                                              "include": ["src"]}),
                 "src/price.ts": "export function withTax(cents: number, rate: number): number {\n"
                                 "  return Math.round(cents + cents * rate);\n}\n",
                 "test/price.test.js": "const assert = require('node:assert');\nconst { withTax } = require("
                                       "'../dist/price');\nit('rounds', () => assert.strictEqual(withTax(999, "
                                       "0.0825), 1081));\n"}
    registries = "" if quick else 'network = { registries = ["npm"] }\n'
    toml = f'[setup]\ncommands = ["npm ci --no-audit --no-fund"]\n{registries}\n[test]\ncommand = "npm test"\n'
    return {"package.json": json.dumps(manifest, indent=2) + "\n", "errand.toml": toml,
            ".gitignore": "node_modules/\ndist/\n", **extra}


def make_project(root: Path, files: dict[str, str], *, npm: bool) -> Path:
    root.mkdir(parents=True)
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    if npm:  # the lockfile, written by npm from the registry the host's npm is configured with
        subprocess.run(["npm", "install", "--package-lock-only", "--ignore-scripts", "--no-audit", "--no-fund"],
                       cwd=root, check=True, capture_output=True, timeout=600)
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "first")
    git(root, "tag", "-a", "v1.4.0", "-m", "1.4.0")
    return root


def cpu_seconds() -> float:
    """CPU seconds this process and the children it has waited for used: with the set-up
    sandbox's own (its cgroup's count, in ``setup_finished``), the figure beside the wall
    time that a loaded machine inflates least."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


async def environment_ready(store: Any, repo: Path, script: Path) -> tuple[float, float, float, Any]:
    """Seconds from a new commit to its environment ready (checkout, errand.toml, set-up step),
    the seconds its setup or refresh commands ran, the CPU seconds it all took, and the set-up
    environment."""
    from errand.tasks.round import steps
    from errand.tasks.round.environment import Environment
    from errand.tasks.service import TaskService

    task = await asyncio.to_thread(TaskService(store).submit, "bench", repo=repo, model=f"scripted:{script}")
    run = await asyncio.to_thread(store.start_run, task.id, "bench")

    marks: dict[str, float] = {}

    async def note(kind: str, data: dict[str, Any]) -> None:
        if kind == "setup_output" and str(data.get("text", "")).startswith("$ "):
            marks.setdefault("commands", time.perf_counter())
        elif kind == "setup_tree":
            marks["ended"] = time.perf_counter()
        elif kind == "setup_finished" and isinstance(data.get("cpu_seconds"), float):
            marks["sandbox_cpu"] = data["cpu_seconds"]

    start, cpu = time.perf_counter(), cpu_seconds()
    base_tree = await asyncio.to_thread(steps.base_checkout, task)
    environment = await asyncio.to_thread(Environment.load, base_tree)
    setup = await steps.set_up(environment, task, run, base_tree, steps.Journal(note))
    seconds, cpu = time.perf_counter() - start, cpu_seconds() - cpu + marks.get("sandbox_cpu", 0.0)
    await asyncio.to_thread(steps.remove_work, run)
    commands = marks["ended"] - marks["commands"] if "ended" in marks and "commands" in marks else 0.0
    return seconds, commands, cpu, setup


async def bench_environment(name: str, work: Path, *, quick: bool, commits: int, rebuilds: int) -> dict[str, Any]:
    from errand.tasks.store.tasks import TaskStore

    npm = name == "npm"
    started = time.perf_counter()
    repo = make_project(work / name, _npm_project(quick) if npm else _pip_project(quick), npm=npm)
    print(f"{name}: made the project in {time.perf_counter() - started:.1f}s", flush=True)
    script = work / "script.json"
    script.write_text("[]")
    source = "src/price." + ("js" if quick else "ts") if npm else "src/tally/core.py"
    lockfile = "package-lock.json" if npm else "requirements-test.txt"
    refreshes: list[float] = []
    commands: list[float] = []
    builds: list[float] = []
    refresh_cpu: list[float] = []
    build_cpu: list[float] = []
    loads = [os.getloadavg()[0]]  # the 1-minute load average as each environment was asked for
    store = TaskStore.open()
    try:
        seconds, _ran, cpu, setup = await environment_ready(store, repo, script)
        builds.append(seconds)
        build_cpu.append(cpu)
        print(f"  first setup: {seconds:.2f}s (refresh {list(setup.refreshed)})", flush=True)
        for n in range(commits):
            with (repo / source).open("a") as file:
                file.write(f"\n// change {n}\n" if npm else f"\n# change {n}\n")
            git(repo, "commit", "-q", "-am", f"change {n}")
            seconds, ran, cpu, setup = await environment_ready(store, repo, script)
            if not setup.reused or setup.refresh_failed:
                raise SystemExit(f"{name}: commit {n} was not refreshed over the cached environment: {setup}")
            refreshes.append(seconds)
            commands.append(ran)
            refresh_cpu.append(cpu)
            loads.append(os.getloadavg()[0])
            print(f"  new commit {n + 1}/{commits}: ready in {seconds:.2f}s, {cpu:.2f} CPU s (refresh command, "
                  f"snapshot and layer {ran:.2f}s)", flush=True)
        for n in range(rebuilds - 1):
            with (repo / lockfile).open("a") as file:
                file.write("\n" if npm else f"\n# relock {n}\n")
            git(repo, "commit", "-q", "-am", f"relock {n}")
            seconds, _ran, cpu, setup = await environment_ready(store, repo, script)
            if setup.reused:
                raise SystemExit(f"{name}: a changed {lockfile} did not rebuild")
            builds.append(seconds)
            build_cpu.append(cpu)
            loads.append(os.getloadavg()[0])
            print(f"  changed {lockfile} {n + 1}/{rebuilds - 1}: rebuilt in {seconds:.2f}s", flush=True)
    finally:
        store.close()
    return {"refresh": refreshes, "refresh_command": commands, "rebuild": builds, "load": loads,
            "refresh_cpu": refresh_cpu, "rebuild_cpu": build_cpu,
            "refresh_how": list(setup.refreshed)}


# ------------------------------------------------------------------ the report


def seconds_row(label: str, values: list[float], target: str = "") -> str:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return (f"{label:44} {statistics.median(ordered):8.2f} {p95:8.2f} {ordered[-1]:8.2f} {len(values):4d}   "
            f"{target}")


def report_environments(results: dict[str, dict[str, list[float]]]) -> None:
    print(f"\n{'environment (s)':44} {'p50':>8} {'p95':>8} {'max':>8} {'n':>4}   target")
    for name, figures in results.items():
        print(seconds_row(f"{name}: new commit → environment ready", figures["refresh"], "p50 ≤ 2 s"))
        print(seconds_row(f"{name}:   (refresh command, snapshot, layer kept)", figures["refresh_command"]))
        own = [ready - ran for ready, ran in zip(figures["refresh"], figures["refresh_command"], strict=True)]
        print(seconds_row(f"{name}:   (checkout, key, copy, sandbox start)", own))
        print(seconds_row(f"{name}:   rebuild (first, changed lockfile)", figures["rebuild"]))
        print(seconds_row(f"{name}:   CPU seconds, new commit", figures["refresh_cpu"]))
        print(seconds_row(f"{name}:   CPU seconds, rebuild", figures["rebuild_cpu"]))
        ratio = statistics.median(figures["rebuild"]) / statistics.median(figures["refresh"])
        print(f"{name + ':   rebuild / refresh, p50':44} {ratio:8.1f}×")
        loads = figures["load"]
        print(f"{name + ':   machine load (1-min average)':44} {statistics.median(loads):8.1f} "
              f"{min(loads):8.1f} {max(loads):8.1f}   (p50, min, max over the section)")
        print(f"{name + ':   refresh':44} {'; '.join(figures['refresh_how']) or '(none)'}")


def report_flow(results: dict[str, list[float]], files: int, runs: int) -> None:
    print(f"\nflow: {files} files, {runs} runs")
    print(f"{'figure (ms)':44} {'p50':>8} {'p95':>8} {'max':>8}   target")
    rows = [("submit → first model request", "submit_to_first_request", "p50 ≤ 1000"),
            ("  intake (checks, insert)", "intake", ""),
            ("  claim (queued → round started)", "claim", ""),
            ("  working copy + sandbox → first request", "round_started_to_first_request", ""),
            ("diff + evidence beyond the test command", "evidence_beyond_tests", "p50 ≤ 500"),
            ("  (the test command itself)", "test_command", "")]
    for label, key, target in rows:
        print(f"{label:44} {percentiles(results[key])}   {target}")


async def bench_all(options: argparse.Namespace, work: Path) -> dict[str, Any]:
    results: dict[str, Any] = {}
    if options.only in (None, "environments"):
        results["environments"] = {name: await bench_environment(name, work, quick=options.quick,
                                                                 commits=options.commits, rebuilds=options.rebuilds)
                                   for name in ("pip", "npm")}
    if options.only in (None, "flow"):
        results["flow"] = await bench(options.files, options.runs)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="seconds: projects that need no registry, few runs")
    parser.add_argument("--only", choices=("environments", "flow"))
    parser.add_argument("--commits", type=int, help="new source commits per project (default 10; quick 2)")
    parser.add_argument("--rebuilds", type=int, help="setups counting the first (default 3; quick 1)")
    parser.add_argument("--files", type=int, help="files of the flow's repository (default 10,000; quick 200)")
    parser.add_argument("--runs", type=int, help="flow tasks after the warm-up (default 10; quick 2)")
    parser.add_argument("--json", type=Path)
    options = parser.parse_args()
    for name, full, quick in (("commits", 10, 2), ("rebuilds", 3, 1), ("files", 10_000, 200), ("runs", 10, 2)):
        if getattr(options, name) is None:
            setattr(options, name, quick if options.quick else full)
    if options.rebuilds < 1 or options.commits < 1 or options.runs < 1:
        parser.error("--commits, --rebuilds and --runs must be at least 1")
    load_at_start = os.getloadavg()[0]
    work = Path(tempfile.mkdtemp(prefix="errand-bench-tasks-"))
    os.environ["ERRAND_HOME"] = str(work / "home")
    os.environ.pop("ERRAND_DATABASE_URL", None)
    try:
        results = asyncio.run(bench_all(options, work))
    except KeyboardInterrupt:
        return 130
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\nerrand task benchmark{' (quick)' if options.quick else ''}: {os.cpu_count()} cores, "
          f"Python {sys.version.split()[0]}, load average (1 min) {load_at_start:.1f} at the start, "
          f"{os.getloadavg()[0]:.1f} at the end (the machine is shared: read the figures beside it)")
    if "environments" in results:
        report_environments(results["environments"])
    if "flow" in results:
        report_flow(results["flow"], options.files, options.runs)
    if options.json:
        options.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
