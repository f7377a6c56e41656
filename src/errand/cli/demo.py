"""``errand demo``: errand's main job, run for real on a sample repository.

A small project with a failing test is made under errand's home; a task is
submitted exactly as ``errand run`` submits it; a worker (in this process, or the
background worker if one is running) runs the agent in a sandbox over a working
copy; the log streams; then the evidence, the diff, and the accept, which commits
on a new branch while the sample's own checkout stays as it was.

The model is ``--model``, else ``$ERRAND_MODEL``, else errand's scripted demo
model, a recorded fix replayed with no network — the demo says which, plainly.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from pathlib import Path

from rich.console import Console

from errand import _settings
from errand.cli import tasks as cli_tasks
from errand.cli.events import LogPrinter
from errand.tasks.engines.local import EngineBusy, LocalEngine
from errand.tasks.lifecycle import TaskState
from errand.tasks.service import TaskService
from errand.tasks.store.tasks import TaskStore

__all__ = ["run"]

PRICING = '''\
"""Prices for the shop's checkout."""


def total(prices: list[float], discount_percent: float = 0) -> float:
    """The sum of ``prices`` less ``discount_percent`` percent, rounded to cents."""
    subtotal = sum(prices)
    return round(subtotal - discount_percent, 2)
'''
TESTS = '''\
import unittest

from pricing import total


class TotalTest(unittest.TestCase):
    def test_no_discount(self):
        self.assertEqual(total([10.0, 5.5]), 15.5)

    def test_discount_is_a_percentage(self):
        self.assertEqual(total([200.0], discount_percent=10), 180.0)


if __name__ == "__main__":
    unittest.main()
'''
AGENTS = "# Notes for agents\n\nRun the tests with `python3 -m unittest -v`. Keep functions typed.\n"
TOML = '[test]\ncommand = "python3 -m unittest -v"\n'
INSTRUCTION = "The 10% discount test fails: total() subtracts the percentage as an amount. Fix it."
FIXED = "    return round(subtotal * (1 - discount_percent / 100), 2)"
SCRIPT = [
    {"content": "Let me look at the code and run the tests first.",
     "tool_calls": [{"name": "read_file", "arguments": {"path": "pricing.py"}},
                    {"name": "shell", "arguments": {"command": "python3 -m unittest -v"}}]},
    {"content": "discount_percent is subtracted as an amount; apply it as a percentage.",
     "tool_calls": [{"name": "edit_file", "arguments": {
         "path": "pricing.py", "old": "    return round(subtotal - discount_percent, 2)", "new": FIXED}}]},
    {"tool_calls": [{"name": "shell", "arguments": {"command": "python3 -m unittest -v"}}]},
    {"tool_calls": [{"name": "finish", "arguments": {
        "summary": "total() now applies discount_percent as a percentage of the subtotal; both tests pass.",
        "assumptions": ["A discount is a percentage from 0 to 100, applied before rounding."]}}]},
]


async def run(console: Console, model: str | None = None) -> None:
    sample = _sample_repo(console)
    spec = model or os.environ.get("ERRAND_MODEL")
    if spec:
        source = "--model" if model else "ERRAND_MODEL"
        console.print(f"[bold]model:[/] {cli_tasks.shown(spec, lines=False)} (from {source})")
    else:
        script = sample.parent / "demo-model.json"
        script.write_text(json.dumps(SCRIPT, indent=1))
        spec = f"scripted:{script}"
        console.print("[bold yellow]No model is configured[/] (no --model, ERRAND_MODEL unset), so this demo uses "
                      "errand's [bold]scripted demo model[/]: it replays a recorded fix, offline. Everything "
                      "else — sandbox, git, tests, evidence, accept — runs for real. To use a real model: "
                      "ERRAND_MODEL=openai:gpt-4.1 (with OPENAI_API_KEY) or anthropic:claude-sonnet-4-5.")
    with TaskStore.open() as store:
        service = TaskService(store)
        task = service.submit(INSTRUCTION, repo=sample, model=spec)
        console.print(f"\n[bold]1. submitted[/] {task.id} — as `errand run \"...\" --repo {sample}` does. "
                      "It is queued; a worker runs it in the background.\n")
        await _work(console, store, task.id)
        _review(console, service, task.id, sample)


def _sample_repo(console: Console) -> Path:
    root = _settings.home() / "demo" / time.strftime("pricing-%Y%m%d-%H%M%S")
    root.mkdir(parents=True)
    for name, text in (("pricing.py", PRICING), ("test_pricing.py", TESTS), ("AGENTS.md", AGENTS),
                       ("errand.toml", TOML)):
        (root / name).write_text(text)
    env = {**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}
    for args in (["init", "-q", "-b", "main"], ["config", "user.name", "errand demo"],
                 ["config", "user.email", "demo@errand.invalid"], ["add", "-A"], ["commit", "-q", "-m", "pricing"]):
        subprocess.run(["git", *args], cwd=root, env=env, check=True, capture_output=True)
    console.print(f"[bold]0. a sample project[/] at {root}: pricing.py, a failing unittest, AGENTS.md, errand.toml")
    return root


async def _work(console: Console, store: TaskStore, task_id: str) -> None:
    """Run a worker here and stream the task's log until it settles (or follow the
    background worker's, if one already serves this errand home)."""
    engine = LocalEngine(store, concurrency=1)
    stop = asyncio.Event()
    serving: asyncio.Task[None] | None = asyncio.create_task(engine.serve(stop=stop))
    console.print("[bold]2. the worker runs it[/]: a working copy, a sandbox, the agent; every step is an event.")
    after = 0
    printer = LogPrinter(console)
    try:
        while True:
            if serving is not None and serving.done() and isinstance(serving.exception(), EngineBusy):
                console.print("[dim](a background worker serves this errand home; following its work)[/]")
                serving = None
            state = (await asyncio.to_thread(store.get_task, task_id)).state
            for event in await asyncio.to_thread(store.events, task_id, after):
                printer.show(event)
                after = event.id
            if state in (TaskState.READY_FOR_REVIEW, TaskState.ANSWERED, TaskState.FAILED, TaskState.CANCELLED):
                return
            if state is TaskState.NEEDS_INPUT:
                console.print(f"[yellow]answer in another terminal: errand answer {task_id} \"...\"[/]")
            await asyncio.sleep(0.1)
    finally:
        printer.close()
        stop.set()
        if serving is not None:
            await serving


def _review(console: Console, service: TaskService, task_id: str, sample: Path) -> None:
    task = service.get_task(task_id)
    if task.state is not TaskState.READY_FOR_REVIEW:
        console.print(f"[bold red]the task ended {task.state}[/]; `errand logs {task_id}` has the whole log")
        return
    run_ = service.chosen_run(task_id)
    evidence = service.evidence(run_)
    console.print("\n[bold]3. the evidence[/] — the confidence comes from these facts, not the model's opinion:")
    if evidence is not None:
        cli_tasks.print_evidence(console, run_, 1, evidence)
    console.print("\n[bold]4. the diff[/] (`errand diff " + task_id + "`):")
    cli_tasks.print_patch(console, run_.outcome.patch if run_.outcome else "")
    status_before = _git(sample, "status", "--porcelain")
    accepted = service.accept(task_id)
    console.print(f"[bold]5. accepted[/] (`errand accept {task_id}`): commit {accepted.commit[:12]} on branch "
                  f"[bold]{accepted.branch}[/] in {sample}")
    console.print(cli_tasks.shown(_git(sample, "log", "--oneline", "-2", accepted.branch)), end="")
    untouched = _git(sample, "status", "--porcelain") == status_before and \
        _git(sample, "rev-parse", "--abbrev-ref", "HEAD").strip() == "main"
    console.print(f"the sample's checkout is {'untouched: still on main, no changes' if untouched else 'CHANGED'}; "
                  f"`git -C {sample} show {accepted.branch}` shows the commit.")
    console.print(f"\n[bold]done.[/] `errand ls` lists the task; `errand show {task_id}` shows it again.")


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout
