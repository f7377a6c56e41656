"""A new commit of a known repository reuses its environment: real pip and real npm, in the real
sandbox, over real small projects (a pyproject with a build backend and its version from git
tags, a lockfile, a test suite; an npm project with a lockfile and a TypeScript build).

A changed lockfile sets the environment up anew; a changed source only refreshes it (the
cached layer is reused); what the build backend generates is the new commit's."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from engine.harness import git
from engine.projects import npm_project, python_project
from errand.tasks.records import Task
from errand.tasks.round import steps
from errand.tasks.round.environment import Environment
from errand.tasks.round.reuse import TSC_BUILD_INFO
from errand.tasks.service import TaskService
from errand.tasks.store.tasks import TaskStore

pytestmark = [pytest.mark.slow]


class Round:
    """One task on the repository's current HEAD, set up as a round does it, with its log."""

    def __init__(self, store: TaskStore, repo: Path, script: Path) -> None:
        self.store, self.repo, self.script = store, repo, script
        self.events: list[tuple[str, dict[str, Any]]] = []

    async def set_up(self) -> tuple[Task, steps.SetUp, list[tuple[str, dict[str, Any]]]]:
        task = TaskService(self.store).submit("look", repo=self.repo, model=f"scripted:{self.script}")
        run = self.store.start_run(task.id, "test-worker")
        events: list[tuple[str, dict[str, Any]]] = []

        async def sink(kind: str, data: dict[str, Any]) -> None:
            events.append((kind, data))

        base_tree = await asyncio.to_thread(steps.base_checkout, task)
        environment = await asyncio.to_thread(Environment.load, base_tree)
        setup = await steps.set_up(environment, task, run, base_tree, steps.Journal(sink))
        self.last = (task, run, environment, setup)
        return task, setup, events

    async def run_in_copy(self, command: str) -> str:
        """``command``'s output in a sandbox over a working copy of the last task, as an agent's runs."""
        task, run, environment, setup = self.last
        copy = await asyncio.to_thread(steps.prepare_copy, task, run, setup=setup)
        try:
            sandbox = await steps.start_sandbox(environment, setup, copy)
            try:
                result = await steps.check(sandbox, command)
            finally:
                await sandbox.terminate()
        finally:
            await asyncio.to_thread(steps.remove_work, run)
        assert result.exit_code == 0, result.output
        return result.output


def _commit(repo: Path, message: str, files: dict[str, str], tag: str | None = None) -> None:
    for name, text in files.items():
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    if tag:
        git(repo, "tag", "-a", tag, "-m", tag)


def _setups(events: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    return [data for kind, data in events if kind == "setup_started"]


async def test_a_python_projects_new_commit_is_refreshed_and_a_changed_lockfile_rebuilds(
        tmp_path: Path, sqlite_store: TaskStore, script_file: Path) -> None:
    store = sqlite_store
    repo = python_project(tmp_path / "tally")
    rounds = Round(store, repo, script_file)
    _task, first, events = await rounds.set_up()
    [started] = _setups(events)
    assert started["commands"][0] == "python3 -m venv .venv" and not started.get("reused")

    # A new commit: a source change, a version bump of the tag, a tool table added to pyproject.
    pyproject = (repo / "pyproject.toml").read_text() + "\n[tool.ruff]\nline-length = 100\n"
    _commit(repo, "round to cents", {"src/tally/core.py": "def total(amounts):\n    return round(sum(amounts), 2)\n",
                                     "pyproject.toml": pyproject}, tag="v1.5.0")
    _task, second, events = await rounds.set_up()
    [started] = _setups(events)
    assert started.get("reused") == first.key, started  # the cached layer, not setup again
    assert [c for c in started["commands"] if "--no-deps" in c and "-e ." in c], started["commands"]
    assert "pyproject.toml's dependency tables" in first.keyed_on and "requirements-test.txt" in first.keyed_on
    assert second.reused == first.key and second.refresh_failed is None and second.key != first.key
    # What the build backend generates is this commit's: the version file and the installed metadata.
    out = await rounds.run_in_copy("cat src/tally/_version.py; .venv/bin/python -c 'import importlib.metadata as m, "
                                   "tally; print(\"installed\", m.version(\"tally\"), tally.__version__, "
                                   "tally.total([0.1, 0.2]))'")
    assert "__version__ = version = '1.5.0'" in out, out
    assert "installed 1.5.0 1.5.0 0.3" in out, out

    # The same commit again: the refreshed environment is cached, nothing runs.
    _task, again, events = await rounds.set_up()
    assert _setups(events) == [] and again.key == second.key and again.cached

    # A changed lockfile (the test pins): set up anew.
    _commit(repo, "pin more", {"requirements-test.txt": "pytest==8.4.2\n# and nothing else\n"})
    _task, third, events = await rounds.set_up()
    [started] = _setups(events)
    assert started["commands"][0] == "python3 -m venv .venv" and not started.get("reused"), started
    assert third.key not in (first.key, second.key) and not third.reused


async def test_an_npm_projects_new_commit_gets_its_build_and_a_changed_lockfile_rebuilds(
        tmp_path: Path, sqlite_store: TaskStore, script_file: Path) -> None:
    store = sqlite_store
    repo = npm_project(tmp_path / "pricing")
    rounds = Round(store, repo, script_file)
    _task, first, events = await rounds.set_up()
    [started] = _setups(events)
    assert started["commands"] == ["npm ci --no-audit --no-fund"]

    build = f"node_modules/.bin/tsc -p . --incremental --tsBuildInfoFile {TSC_BUILD_INFO}"
    assert first.refreshed == (build,)  # setup's build leaves the build info a commit's refresh starts from
    manifest = json.loads((repo / "package.json").read_text())
    _commit(repo, "round", {"src/price.ts": "export function withTax(cents: number, rate: number): number {\n"
                                            "  return Math.round(cents + cents * rate);\n}\n",
                            "src/discount.ts": "export const discount = (cents: number, share: number): number =>\n"
                                               "  Math.round(cents * (1 - share));\n",
                            "package.json": json.dumps({**manifest, "version": "2.2.0"}, indent=2) + "\n"})
    _task, second, events = await rounds.set_up()
    [started] = _setups(events)
    assert started.get("reused") == first.key and started["commands"] == [build], started
    assert second.refresh_failed is None
    assert first.keyed_on == ("package-lock.json", "package.json's dependency tables")
    # Built from this commit's sources, the new one too, and only those: tsc read the build info.
    out = await rounds.run_in_copy(f"cat dist/price.js dist/discount.js; ls node_modules/.bin/mocha; "
                                   f"{build} --listEmittedFiles")
    assert "Math.round(cents + cents * rate)" in out and "Math.round(cents * (1 - share))" in out, out
    assert "TSFILE" not in out, out  # an up-to-date refreshed tree: nothing to emit again

    # A changed compiler option (not a key file): the refresh's output follows it.
    config = json.loads((repo / "tsconfig.json").read_text())
    config["compilerOptions"]["target"] = "ES5"
    _commit(repo, "es5", {"tsconfig.json": json.dumps(config, indent=2) + "\n"})
    _task, es5, events = await rounds.set_up()
    assert es5.reused == first.key and es5.refresh_failed is None
    out = await rounds.run_in_copy("cat dist/discount.js")
    assert "function (cents, share)" in out and "=>" not in out, out

    lock = json.loads((repo / "package-lock.json").read_text())
    _commit(repo, "relock", {"package-lock.json": json.dumps(lock, indent=4) + "\n"})
    _task, third, events = await rounds.set_up()
    [started] = _setups(events)
    assert started["commands"] == ["npm ci --no-audit --no-fund"] and not started.get("reused"), started
    assert third.key not in (first.key, second.key)


async def test_a_layer_holding_a_path_the_new_commit_tracks_is_not_reused(
        tmp_path: Path, sqlite_store: TaskStore, script_file: Path) -> None:
    store = sqlite_store
    toml = '[setup]\ncommands = ["mkdir -p build && echo generated > build/out.txt"]\n'
    repo = tmp_path / "shadow"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.name", "Test User")
    git(repo, "config", "user.email", "user@example.com")
    _commit(repo, "first", {"errand.toml": toml, "a.py": "A = 1\n"})
    rounds = Round(store, repo, script_file)
    _task, first, _events = await rounds.set_up()
    (repo / "build").mkdir()
    _commit(repo, "track build/", {"build/out.txt": "committed\n"})
    _task, second, events = await rounds.set_up()
    [started] = _setups(events)
    assert not started.get("reused") and second.key != first.key
    out = await rounds.run_in_copy("cat build/out.txt")
    assert out.strip() == "committed"  # the first commit's layer would have hidden it
