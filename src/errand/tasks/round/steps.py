"""The task steps, written once for every engine: prepare a working copy, set up the
environment, start the sandbox, run the agent, collect evidence, finalize.

Each step is a plain async function of its inputs. The local engine
(:mod:`errand.tasks.engines.local`) calls them in-process; a distributed engine calls
the same functions from its activities. A step reports what it does through a
:class:`Journal`, which saves every event before the step goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import json
import logging
import os
import secrets
import shutil
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from errand import _settings
from errand.agent import AgentResult
from errand.errors import ErrandError, ExecTimeout
from errand.repo import Diff, WorkingCopy, checkouts
from errand.repo.generated import Harvest, harvest
from errand.repo.git import run_git
from errand.sandbox import AsyncSandbox, Image, Mount
from errand.sandbox.cache import find_image, find_layer, keep_image, keep_layer
from errand.sandbox.registries import RegistryAccess, host_registries
from errand.sandbox.secret import CA_BUNDLE_PATH, CA_PATH, SYSTEM_BUNDLES
from errand.tasks.errors import SetupFailed
from errand.tasks.evidence import Evidence, TestRun, assess, changed_test_files, failed_checks, moved_tests
from errand.tasks.lifecycle import TaskState
from errand.tasks.records import Run, RunResult, RunState, Task
from errand.tasks.round import reuse, task_secrets
from errand.tasks.round.egress_log import end_sandbox, refusals_note
from errand.tasks.round.environment import Environment, cache_key, keyed_on
from errand.tasks.store.tasks import TaskStore
from errand.tasks.testreport import MAX_REPORT_BYTES, Flips, Report, flips, read_junit, read_output, report_request

__all__ = [
    "RANKING_RULE", "WORKSPACE", "Journal", "SetUp", "SetupFailed", "base_checkout", "cached_set_up", "check",
    "collect_evidence", "finalize", "in_thread_to_its_end", "prepare_copy", "prepared_copy", "rank", "rank_key",
    "remove_work", "remove_work_of", "set_up", "start_sandbox", "tests_on_base", "to_its_end",
]

WORKSPACE = "/workspace"
log = logging.getLogger("errand.tasks.round.steps")
SETUP_TIMEOUT = 1800.0
CHECK_TIMEOUT = 900.0
OUTPUT_TAIL = 8000
# Per event loop: an asyncio lock belongs to the loop it first waited in, and a process may
# run several loops one after another (a benchmark, the eval harness, tests).
_SETUP_LOCKS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, asyncio.Lock]] = \
    weakref.WeakKeyDictionary()


EventSink = Callable[[str, dict[str, Any]], Awaitable[None]]
T = TypeVar("T")


@dataclass
class Journal:
    """Where one run's steps report: every event goes to ``sink`` (the store) at once,
    and the agent's shell commands are tallied for the evidence."""

    sink: EventSink
    commands: list[dict[str, Any]] = field(default_factory=list)
    delivered: set[int] = field(default_factory=set)  # the refs of the messages the agent was given
    _pending: dict[str, str] = field(default_factory=dict)

    async def __call__(self, kind: str, data: dict[str, Any]) -> None:
        if kind == "message_delivered" and isinstance(data.get("ref"), int):
            self.delivered.add(data["ref"])
        if kind == "tool_call" and data.get("name") == "shell":
            self._pending[data["id"]] = str(data.get("arguments", {}).get("command", ""))
        elif kind == "tool_result" and data.get("id") in self._pending:
            self.commands.append({"command": self._pending.pop(data["id"]), "exit_code": data.get("exit_code"),
                                  "ok": bool(data.get("ok"))})
        await self.sink(kind, data)


# ------------------------------------------------------------------ prepare


def work_dir(run: Run) -> Path:
    return work_dir_of(run.id)


def work_dir_of(run_id: str) -> Path:
    return _settings.home() / "work" / run_id


@dataclass(frozen=True)
class SetUp:
    """What every sandbox of a round starts from: the image with setup's effects outside the
    tree, and the layers of the new files setup (and a refresh over it) wrote into the tree."""

    image: Image
    key: str  # the environment's cache key (see environment.cache_key; a refresh's: of it and the tree)
    tree_layers: tuple[Path, ...] = ()  # the top first
    cached: bool = False  # nothing ran for this round: it was in the cache
    isolation: str = "namespace"  # the sandbox tier every sandbox of the round runs on
    diff_excludes: tuple[str, ...] = ()  # what setup wrote into the tree that git does not ignore
    keyed_on: tuple[str, ...] = ()  # what of the tree the environment is keyed on, for a person
    tree: str | None = None  # the git tree it was set up (or refreshed) for
    kept: tuple[str, ...] = ()  # the paths its tree layers hold (directories end in /)
    primed: bool = False  # setup installed the build backend's requirements (errand.tasks.round.reuse.prime)
    reused: str | None = None  # the environment this one refreshed for another commit
    refreshed: tuple[str, ...] = ()  # the refresh commands run over it
    refresh_failed: str | None = None  # the refresh command that failed (the environment is used as it is)

    @property
    def layers(self) -> list[Path]:
        return list(self.tree_layers)

    def describe(self) -> dict[str, Any]:
        """What a run's result keeps of it (``errand show`` says it)."""
        return {"key": self.key, "cached": self.cached, "keyed_on": list(self.keyed_on), "reused": self.reused,
                "refreshed": list(self.refreshed), "refresh_failed": self.refresh_failed}


def base_checkout(task: Task) -> Path:
    """The pristine checkout of the task's base commit: what shapes a round (errand.toml,
    instructions, lockfiles) is read from here, never from an agent's working copy."""
    tree, _commit = WorkingCopy.pristine(task.repo, task.base_commit or task.base_ref, owner=_settings.sandbox_uid())
    return tree


def prepare_copy(task: Task, run: Run, patch: str | None = None, *, setup: SetUp | None = None,
                 name: str = "repo") -> WorkingCopy:
    """A fresh checkout of the task's base commit for one run, owned by the sandbox's uid,
    over what ``setup`` wrote into the tree (out of its diff), with ``patch`` (the work a
    follow-up continues) applied."""
    root = work_dir(run)
    _clear(root / name)  # what a worker that died left of this copy
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o711)  # the sandbox uid must reach its checkout, and read nothing else here
    copy = WorkingCopy.overlaid(task.repo, task.base_commit or task.base_ref, dest=root / name,
                                owner=_settings.sandbox_uid(), layers=setup.layers if setup else [],
                                diff_excludes=setup.diff_excludes if setup else ())
    if patch:
        copy.apply(patch)
    return copy


async def prepared_copy(task: Task, run: Run, patch: str | None = None, *, setup: SetUp | None = None,
                        name: str = "repo") -> WorkingCopy:
    """:func:`prepare_copy` in a thread, to its end though the caller is cancelled meanwhile (then
    the copy is removed: see :func:`in_thread_to_its_end`)."""
    return await in_thread_to_its_end(lambda: prepare_copy(task, run, patch, setup=setup, name=name),
                                      WorkingCopy.remove)


def remove_work(run: Run) -> None:
    """Remove a run's working copies (unmounting their overlays) and everything else it kept."""
    remove_work_of(run.id)


def remove_work_of(run_id: str) -> None:
    """:func:`remove_work` by the run's id alone (a round's closing needs no store for it)."""
    root = work_dir_of(run_id)
    for name in _COPIES:
        checkouts.unmount(root / name)
    shutil.rmtree(root, ignore_errors=True)


async def to_its_end(work: Awaitable[T]) -> tuple[asyncio.Future[T], bool]:
    """``work`` awaited to its end even if the caller is cancelled meanwhile: its finished future,
    and whether a cancel came (the caller then raises it, once it has done what must follow)."""
    future = asyncio.ensure_future(work)
    cancelled = False
    while not future.done():
        try:
            await asyncio.wait([future])  # a cancel of this wait leaves ``future`` running
        except asyncio.CancelledError:
            cancelled = True
    return future, cancelled


async def in_thread_to_its_end(make: Callable[[], T], undo: Callable[[T], None]) -> T:
    """``make()`` run in a thread, and awaited to its end even if the caller is cancelled meanwhile.

    For what mounts a working copy: a thread cannot be cut short, and one left running after its
    caller was cancelled (a worker stopping mid-round) would mount the copy after whatever closes
    the round had unmounted and removed its work: nobody would unmount it, and it would outlive
    the worker. Cancelled, this waits for the thread, gives what ``make`` made to ``undo`` (in a
    thread too), and then raises the cancel."""
    made, cancelled = await to_its_end(asyncio.to_thread(make))
    if not cancelled:
        return made.result()
    if made.exception() is None:  # a failed make leaves nothing (it cleans up)
        undone, _ = await to_its_end(asyncio.to_thread(undo, made.result()))
        if (error := undone.exception()) is not None:
            # Said, not raised: raised, it would stand for the cancel, and a stopping worker's round
            # would fail (its task failed) instead of being left for recovery to queue again.
            log.warning("undoing what a cancelled step made failed: %s", error, exc_info=error)
    raise asyncio.CancelledError


def setup_lock(key: str) -> asyncio.Lock:
    """The lock rounds of one process setting up the environment ``key`` take turns on."""
    return _SETUP_LOCKS.setdefault(asyncio.get_running_loop(), {}).setdefault(key, asyncio.Lock())


def work_runs() -> list[str]:
    """The ids of the runs that have a work directory in this errand home."""
    root = _settings.home() / "work"
    return sorted(path.name for path in root.iterdir() if path.is_dir()) if root.is_dir() else []


_COPIES = ("repo", "base", "setup")  # the working copies a run may have under its work directory


def _clear(dest: Path) -> None:
    checkouts.unmount(dest)
    for path in (dest, *(dest.with_name(dest.name + suffix) for suffix in (".upper", ".work", ".index"))):
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


# ------------------------------------------------------------------ set up


async def set_up(environment: Environment, task: Task, run: Run, base_tree: Path, journal: Journal, *,
                 isolation: str = "namespace", source: str | None = None) -> SetUp:
    """The environment a task's sandboxes start from: the repository's image with its setup
    commands already run, cached under :func:`~errand.tasks.round.environment.cache_key`.

    Setup runs over a working copy of the base commit, with git's objects and tags
    visible and the host's registry settings, under its own egress policy. What it
    writes outside the tree (packages, a virtualenv under ``/opt``) is the image's
    new layer; the new files it writes in the tree (a version file, ``*.egg-info``,
    ``node_modules``) become a layer under every run's working copy, out of its diff.
    A failing command raises :class:`SetupFailed` with its log, after streaming it as
    ``setup_output`` events. ``source`` names the repository in the cache key (default:
    ``task.repo``): an evaluation clones each instance from a copy of its own, stripped
    of later history, yet the instances of one repository share one setup.

    The key covers the lockfiles and the manifests' dependency tables, not the whole
    tree: another commit with the same dependencies finds the environment cached and
    gets a refresh over it (:func:`errand.tasks.round.reuse.refresh`: an editable reinstall
    without dependencies, the project's build), itself cached for that commit's tree.
    """
    for role, network in (("setup", environment.setup_egress), ("agent", environment.network)):
        decision = task_secrets.decide(network)
        if decision.given or decision.withheld:
            await journal("secrets", decision.describe(role))
    registries = host_registries(_SETUP_REGISTRY_SETTINGS)
    tree = await asyncio.to_thread(WorkingCopy.tree_id, base_tree)
    # Off the event loop: it reads the files setup names (and what they include) as well as the lockfiles.
    digest = await asyncio.to_thread(cache_key, base_tree, environment, source=source or task.repo, tree=tree,
                                     registries=registries)
    key = f"env-{digest}"
    keyed = tuple(await asyncio.to_thread(keyed_on, base_tree, environment))
    if not environment.setup:
        return SetUp(environment.image, key, isolation=isolation, keyed_on=keyed, tree=tree)
    async with setup_lock(key):
        built = _cached_setup(key, isolation)
        if built is not None and await asyncio.to_thread(_shadowed, built, base_tree):
            # What setup wrote into another commit's tree is tracked in this one: a layer of it
            # would hide this commit's files. This commit gets a setup of its own.
            key = f"env-{_digest(key, tree)}"
            built = _cached_setup(key, isolation)
        if built is None:
            await journal("setup_started", {"key": key, "commands": list(environment.setup),
                                            "network": environment.setup_egress.to_dict(),
                                            "keyed_on": list(keyed)})
            return await _set_up_now(environment, task, run, base_tree, journal, key, registries, isolation,
                                     replace(SetUp(environment.image, key), keyed_on=keyed, tree=tree))
    if built.tree == tree:
        await journal("setup_cached", {"key": key, "tree_layer": bool(built.tree_layers),
                                       "keyed_on": list(built.keyed_on), "reused": built.reused})
        return built
    return await _refreshed(environment, task, run, base_tree, journal, built, tree, registries)


def _digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


async def _refreshed(environment: Environment, task: Task, run: Run, base_tree: Path, journal: Journal,
                     built: SetUp, tree: str, registries: RegistryAccess) -> SetUp:
    """The environment ``built`` (set up for another commit with the same dependencies) made
    right for this commit's tree by its refresh, cached under a key of both."""
    plan = await asyncio.to_thread(_refresh_plan, environment, base_tree, built.primed)
    if not plan:
        await journal("setup_cached", {"key": built.key, "tree_layer": bool(built.tree_layers),
                                       "keyed_on": list(built.keyed_on), "reused": built.key})
        return replace(built, reused=built.key, tree=tree)
    key = f"env-{_digest(built.key, tree)}"
    async with setup_lock(key):
        cached = _cached_setup(key, built.isolation)
        if cached is not None:
            await journal("setup_cached", {"key": key, "tree_layer": bool(cached.tree_layers),
                                           "keyed_on": list(cached.keyed_on), "reused": cached.reused})
            return cached
        await journal("setup_started", {"key": key, "commands": list(plan), "network":
                                        environment.setup_egress.to_dict(), "keyed_on": list(built.keyed_on),
                                        "reused": built.key})
        return await _set_up_now(environment, task, run, base_tree, journal, key, registries, built.isolation,
                                 replace(built, key=key, tree=tree, reused=built.key, cached=False), refresh=plan)


def _refresh_plan(environment: Environment, base_tree: Path, primed: bool) -> tuple[str, ...]:
    if environment.setup_refresh is not None:
        return environment.setup_refresh
    return reuse.refresh(base_tree, environment.setup, primed=primed).commands


def _shadowed(built: SetUp, base_tree: Path) -> bool:
    """Whether a path the environment's tree layers hold is tracked in the commit of ``base_tree``."""
    if not built.kept:
        return False
    host_git = base_tree.parent / "host.git"
    tracked = run_git(["ls-tree", "-r", "-z", "--name-only", "--full-tree", "refs/errand/base"], host_git,
                      git_dir=host_git).split("\0")
    files = {path for path in built.kept if not path.endswith("/")}
    directories = {path.rstrip("/") for path in built.kept if path.endswith("/")}
    for path in filter(None, tracked):
        if path in files:
            return True
        parts = path.split("/")
        if any("/".join(parts[:depth]) in directories for depth in range(1, len(parts))):
            return True
    return False


async def _set_up_now(environment: Environment, task: Task, run: Run, base_tree: Path, journal: Journal, key: str,
                      registries: RegistryAccess, isolation: str, made: SetUp, *,
                      refresh: tuple[str, ...] | None = None) -> SetUp:
    """Run setup (``refresh`` None) or a refresh over ``made`` (its image and tree layers) in a
    sandbox over a working copy of the base commit, and keep what it made under ``key``."""
    over = made if refresh is not None else None
    copy = await prepared_copy(task, run, name="setup", setup=over)
    labels = {"task": task.id, "run": run.id, "role": "setup"}
    try:
        if refresh is None:
            commands = Commands(environment.setup, await asyncio.to_thread(reuse.prime, base_tree, environment.setup))
            image, done = await _run_setup(environment, await _built_image(environment, journal), copy, registries,
                                           journal, isolation, labels, commands,
                                           lambda primed: _refresh_plan(environment, base_tree, primed))
        else:
            assert over is not None
            image, done = await _run_setup(environment, over.image, copy, registries, journal, isolation, labels,
                                           Commands(), lambda _primed: refresh)
        layer, kept = await asyncio.to_thread(_keep_tree_writes, copy, key)
    finally:
        await asyncio.to_thread(copy.remove)
    await journal("setup_tree", {"kept": len(kept.kept), "kept_sample": kept.kept[:20],
                                 "untracked": kept.untracked[:20], "left_tracked": kept.changed_tracked[:20]})
    below = over.tree_layers if over is not None else ()
    made = replace(made, tree_layers=(layer, *below), isolation=isolation, primed=made.primed or done.primed,
                   diff_excludes=tuple(dict.fromkeys([*kept.untracked, *made.diff_excludes])),
                   kept=tuple(dict.fromkeys([*kept.kept, *made.kept])), refreshed=done.refreshed,
                   refresh_failed=done.failed)
    image = keep_image(image, key, _labels_of(made))
    await journal("setup_finished", {"key": key, "reused": made.reused, "refreshed": list(made.refreshed),
                                     "refresh_failed": made.refresh_failed, "cpu_seconds": done.cpu_seconds})
    return replace(made, image=image)


_LABEL = "errand.setup."  # what an environment's image says of it, for _cached_setup
# Setup gets the host's pip and npm settings (where to find packages); which registries
# it may reach is its egress policy's business ([setup] network).
_SETUP_REGISTRY_SETTINGS = ("pip", "npm")


def _labels_of(made: SetUp) -> dict[str, str]:
    return {_LABEL + name: json.dumps(value) for name, value in (
        ("trees", [layer.name for layer in made.tree_layers]), ("untracked", list(made.diff_excludes)),
        ("kept", list(made.kept)), ("keyed_on", list(made.keyed_on)), ("tree", made.tree),
        ("primed", made.primed), ("reused", made.reused), ("refreshed", list(made.refreshed)),
        ("refresh_failed", made.refresh_failed))}


def cached_set_up(environment: Environment, key: str, isolation: str) -> SetUp:
    """The set-up environment ``key`` that :func:`set_up` made on this worker earlier (another
    process of the same errand home continuing a round), without running anything."""
    if not environment.setup:
        return SetUp(environment.image, key, isolation=isolation)
    cached = _cached_setup(key, isolation)
    if cached is None:
        raise ErrandError(f"the set-up environment {key} is not in this worker's cache", code="setup_missing")
    return cached


def _cached_setup(key: str, isolation: str) -> SetUp | None:
    image = find_image(key)
    if image is None or image.config is None:
        return None
    try:
        said = {name.removeprefix(_LABEL): json.loads(value) for name, value in image.config.labels.items()
                if name.startswith(_LABEL)}
        layers = [find_layer(name) for name in said["trees"]]
    except (KeyError, ValueError, TypeError):
        return None
    if not layers or any(layer is None for layer in layers):
        return None
    return SetUp(image, key, tuple(layer for layer in layers if layer is not None), cached=True, isolation=isolation,
                 diff_excludes=tuple(said.get("untracked") or ()), keyed_on=tuple(said.get("keyed_on") or ()),
                 tree=said.get("tree"), kept=tuple(said.get("kept") or ()), primed=bool(said.get("primed")),
                 reused=said.get("reused"), refreshed=tuple(said.get("refreshed") or ()),
                 refresh_failed=said.get("refresh_failed"))


def _keep_tree_writes(copy: WorkingCopy, key: str) -> tuple[Path, Harvest]:
    """Keep the new files setup wrote into the tree as a layer; where it is, and what was kept and left."""
    return keep_layer(f"tree-{key.removeprefix('env-')}", lambda partial: harvest(copy, partial))


@dataclass(frozen=True)
class Commands:
    """What a setup sandbox runs: ``setup`` (a failure fails it), then ``prime`` (a failure
    only means the refresh builds in isolation)."""

    setup: tuple[str, ...] = ()
    prime: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Done:
    primed: bool
    refreshed: tuple[str, ...]
    failed: str | None
    cpu_seconds: float | None = None  # the setup sandbox's, by its cgroup (None where not counted)


async def _built_image(environment: Environment, journal: Journal) -> Image:
    build_lines: list[str] = []
    try:
        return Image.from_config(await environment.image.build_async(log=build_lines.append))
    except ErrandError as error:
        raise SetupFailed(f"building the environment's image failed: {error.message}", command="image build",
                          exit_code=None, log="\n".join(build_lines)) from error
    finally:
        for line in build_lines:
            await journal("setup_output", {"text": line + "\n"})


async def _run_setup(environment: Environment, image: Image, copy: WorkingCopy, registries: RegistryAccess,
                     journal: Journal, isolation: str, labels: Mapping[str, str], commands: Commands,
                     refresh: Callable[[bool], tuple[str, ...]]) -> tuple[Image, _Done]:
    """Run the setup commands over ``copy``, prime, refresh, and snapshot the result; every
    process of the sandbox has ended when this returns, so the host may read the tree. A
    failing refresh command is said in the log, and the environment used as it is."""
    async def log(line: str) -> None:
        await journal("setup_output", {"text": line})

    async def run(command: str) -> TestRun:
        await log(f"$ {command}\n")
        return await _stream(sandbox, command, SETUP_TIMEOUT, log, env=env)

    given = task_secrets.decide(environment.setup_egress).given
    env = dict(registries.env)
    if given:  # pip's and npm's cert settings name the trust store: the one that holds the sandbox's CA too
        env.update({name: CA_BUNDLE_PATH for name, value in env.items() if value in SYSTEM_BUNDLES})
    mounts = [Mount.bind(copy.path, WORKSPACE, read_only=False), *_object_mounts(copy),
              *(Mount.bind(path, path) for path in registries.paths)]
    sandbox = await AsyncSandbox.create(
        image, mounts=mounts,
        network=environment.setup_egress, resources=environment.resources, timeout=None, workdir=WORKSPACE,
        env={"CI": "1"}, isolation=isolation, labels=labels,
        secrets=given)
    try:
        for command in commands.setup:
            result = await run(command)
            if not result.ok:
                raise SetupFailed(f"setup command `{command}` {_ended(result)}; its output is in the task's log"
                                  f"{_setup_hint(result.output)}"
                                  f"{await refusals_note(sandbox, environment.setup_registries)}",
                                  command=command, exit_code=result.exit_code, log=result.output)
        primed = bool(commands.prime)
        for command in commands.prime:
            if not (await run(command)).ok:
                await log("(priming the refresh failed: a later commit's reinstall builds in isolation)\n")
                primed = False
                break
        refreshed, failed = refresh(primed), None
        for command in refreshed:
            result = await run(command)
            if not result.ok:
                failed = command
                await log(f"(the refresh `{command}` {_ended(result)}: the environment is used as it is)\n")
                break
        done = _Done(primed, refreshed, failed, _cpu_seconds(sandbox))  # before the snapshot touches the sandbox
        await _without_egress_ca(sandbox)
        return await sandbox.snapshot(), done
    finally:
        await end_sandbox(sandbox, journal, "setup")


async def _without_egress_ca(sandbox: AsyncSandbox) -> None:
    """Take the setup sandbox's egress CA (made for its declared secrets) out of what its
    snapshot keeps: the environment's image is the same with secrets or without, and each
    later sandbox trusts its own CA alone."""
    if not await sandbox.files.exists(CA_PATH):
        return
    ca = await sandbox.files.read(CA_PATH)
    for path in SYSTEM_BUNDLES:
        if await sandbox.files.exists(path):
            store = await sandbox.files.read(path)
            if store.endswith(ca):
                await sandbox.files.write(path, store[:-len(ca)])
            break
    for path in (CA_PATH, CA_BUNDLE_PATH):
        await sandbox.files.remove(path)


def _cpu_seconds(sandbox: AsyncSandbox) -> float | None:
    try:
        return sandbox.usage().cpu_seconds
    except (ErrandError, OSError, ValueError):  # a figure for the log, never a reason to fail setup
        return None


def _object_mounts(copy: WorkingCopy) -> list[Mount]:
    return [Mount.bind(path, str(path), read_only=True) for path in copy.object_mounts]


async def start_sandbox(environment: Environment, setup: SetUp, copy: WorkingCopy, *,
                        labels: Mapping[str, str] | None = None, image: Image | None = None,
                        gateway: str | None = None) -> AsyncSandbox:
    """A run's sandbox: the set-up image with the checkout bound writable at /workspace,
    labelled (``task``, ``run``, ``role``) so listings say whose it is, with the operator's
    declared secrets its network allows (:mod:`errand.tasks.round.task_secrets`). An agent
    CLI's sandbox passes its ``image`` (the set-up one with the CLI on top) and the host's
    model ``gateway`` it reaches at ``errand.sandbox.GATEWAY_URL``."""
    return await AsyncSandbox.create(
        image or setup.image, mounts=[Mount.bind(copy.path, WORKSPACE, read_only=False), *_object_mounts(copy)],
        network=environment.network, resources=environment.resources, timeout=None, workdir=WORKSPACE,
        env={"CI": "1"}, isolation=setup.isolation, labels=labels, gateway=gateway,
        secrets=task_secrets.decide(environment.network).given)


# ------------------------------------------------------------------ checks


async def check(sandbox: AsyncSandbox, command: str, *, timeout: float = CHECK_TIMEOUT,
                on_output: Callable[[str], Awaitable[None]] | None = None, report: bool = False) -> TestRun:
    """Run a check command (tests, lint) in the sandbox's working copy. With ``report`` the test
    runner is asked for a machine-readable report (:func:`report_request`), which names the
    tests where it was written; its printed summary is read where not."""
    if not report:
        return await _stream(sandbox, command, timeout, on_output or _ignore)
    path = f"/tmp/errand-report-{secrets.token_hex(8)}.xml"
    result = await _stream(sandbox, command, timeout, on_output or _ignore, env=report_request(path))
    try:
        junit = read_junit(await sandbox.files.read(path, max_bytes=MAX_REPORT_BYTES))
    except ErrandError:  # none written (not pytest, or pytest never started), or too large
        junit = None
    # pytest names the report it wrote; that line is errand's doing, not the project's output.
    result = replace(result, output="".join(line for line in result.output.splitlines(keepends=True)
                                            if path not in line))
    return result if junit is None else _with_junit(result, junit)


def _with_junit(result: TestRun, junit: Report) -> TestRun:
    """The run with its JUnit report's names. Where its printed summary counts otherwise (the
    command ran pytest more than once, and the report is the last run's), the summary's counts
    stand, and only the report's failing names are kept."""
    printed = result.report()
    if printed.passed is not None and (printed.passed, printed.failed) != (junit.passed, junit.failed):
        junit = Report(printed.passed, printed.failed, junit.failing, None, printed.source)
    return TestRun.of(result.command, result.exit_code, result.seconds, result.output, junit)


async def _ignore(_text: str) -> None:
    return None


async def _stream(sandbox: AsyncSandbox, command: str, timeout: float,
                  on_output: Callable[[str], Awaitable[None]], env: dict[str, str] | None = None) -> TestRun:
    start = time.monotonic()
    process = await sandbox.exec("sh", "-c", 'exec 2>&1; eval "$1"', "sh", command, cwd=WORKSPACE,
                                 timeout=timeout, env=env)
    await process.stdin.close()
    output: list[str] = []
    async for chunk in process.stdout.chunks():
        text = chunk.decode(errors="replace")
        output.append(text)
        await on_output(text)
    try:
        exit_code: int | None = await process.wait()
    except ExecTimeout:
        exit_code = None
    text = "".join(output)
    return TestRun.of(command, exit_code, round(time.monotonic() - start, 3), text[-OUTPUT_TAIL:], read_output(text))


def _setup_hint(output: str) -> str:
    """What a failed setup's output shows that a person fixes in errand.toml, said in a clause."""
    if "externally-managed-environment" in output:  # pip, in an image whose Python its distribution manages
        return ("; the image's Python is externally managed (PEP 668), so install into a virtual environment: "
                "`python3 -m venv .venv`, then `.venv/bin/pip install ...` (see docs/errand-toml.md)")
    return ""


def _ended(result: TestRun) -> str:
    return "timed out" if result.exit_code is None else f"exited with code {result.exit_code}"


async def tests_on_base(environment: Environment, setup: SetUp, copy: WorkingCopy,
                        journal: Journal, *, labels: Mapping[str, str] | None = None) -> TestRun | None:
    """The test command's result on the base commit, in a sandbox of its own over a
    checkout the agent never touches. Cached per (base commit, environment, command),
    and shared while it runs: tasks on one base run it once — the first runs it, the
    others (in this process or another of the same errand home) wait for its result."""
    if environment.test is None:
        return None
    digest = hashlib.sha256(json.dumps([copy.base_commit, setup.key, environment.test]).encode()).hexdigest()[:32]
    cached_at = _settings.cache_dir() / "baselines" / f"{digest}.json"
    async with _baseline_turn(cached_at):
        cached = _cached_baseline(cached_at)
        if cached is not None:
            await _journal_baseline(journal, cached, cached=True)
            return cached
        result = await _run_baseline(environment, setup, copy, journal, labels)
        cached_at.parent.mkdir(parents=True, exist_ok=True)
        partial = cached_at.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(json.dumps(result.__dict__))
        os.replace(partial, cached_at)
    await _journal_baseline(journal, result, cached=False)
    return result


def _cached_baseline(path: Path) -> TestRun | None:
    try:
        return replace(TestRun(**json.loads(path.read_text())), cached=True)
    except (OSError, ValueError, TypeError):
        return None


async def _run_baseline(environment: Environment, setup: SetUp, copy: WorkingCopy, journal: Journal,
                        labels: Mapping[str, str] | None) -> TestRun:
    assert environment.test is not None
    # A worker killed while this ran left its checkout: the round's new worker runs it again over a fresh one.
    await asyncio.to_thread(_clear, copy.path.parent / "base")
    base = await in_thread_to_its_end(
        lambda: WorkingCopy.overlaid(copy.source, copy.base_commit, dest=copy.path.parent / "base",
                                     owner=_settings.sandbox_uid(), layers=setup.layers,
                                     diff_excludes=setup.diff_excludes),
        WorkingCopy.remove)
    try:
        sandbox = await start_sandbox(environment, setup, base, labels={**(labels or {}), "role": "baseline"})
        try:
            return await check(sandbox, environment.test, report=True)
        finally:
            await end_sandbox(sandbox, journal, "baseline")
    finally:
        await asyncio.to_thread(base.remove)


@contextlib.asynccontextmanager
async def _baseline_turn(cached_at: Path) -> AsyncIterator[None]:
    """One baseline run at a time per cache entry: an asyncio lock within this process, and an
    exclusive lock on a file of its name across processes (polled, so a wait can be cancelled;
    the kernel drops it if its holder dies). The lock files live apart from the cache's entries."""
    async with setup_lock(f"baseline-{cached_at.stem}"):
        locks = cached_at.parent.with_name("baseline-locks")
        locks.mkdir(parents=True, exist_ok=True)
        fd = os.open(locks / f"{cached_at.stem}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    await asyncio.sleep(0.1)
            yield
        finally:
            os.close(fd)


async def _journal_baseline(journal: Journal, result: TestRun, *, cached: bool) -> None:
    """Every round's log says what the tests did on the base, run now or taken from the cache."""
    await journal("tests_before", {"command": result.command, "exit_code": result.exit_code,
                                   "passed": result.passed, "failed": result.failed, "cached": cached})


# ------------------------------------------------------------------ evidence


async def collect_evidence(
    result: AgentResult, diff: Diff, journal: Journal, *, environment: Environment, sandbox: AsyncSandbox,
    tests_before: TestRun | None,
) -> Evidence:
    """Run the checks on the result and put the evidence together with its confidence."""
    async def output(text: str) -> None:
        await journal("check_output", {"text": text})

    tests_after = lint_after = None
    if environment.test is not None and tests_before is not None and not diff.files:
        # The tree is the base's (what accepting it would land): its tests ran on the base already.
        await journal("check_skipped", {"what": "tests", "reason": "nothing changed: the tests on the base stand"})
        tests_after = replace(tests_before, cached=True)
    elif environment.test is not None:
        await journal("check_started", {"what": "tests", "command": environment.test})
        tests_after = await check(sandbox, environment.test, on_output=output, report=True)
    if environment.lint is not None:
        await journal("check_started", {"what": "lint", "command": environment.lint})
        lint_after = await check(sandbox, environment.lint, on_output=output)
    files = [{"path": f.path, "status": f.status, "additions": f.additions, "deletions": f.deletions}
             for f in diff.files]
    diff_unchanged = tests_after is not None and tests_after.cached
    flipped = (flips(tests_before.report(), tests_after.report(), moved_tests(diff.files))
               if tests_before and tests_after else Flips((), ()))
    evidence = Evidence(
        exit_status=result.status, exit_detail=result.detail, tests_before=tests_before and tests_before.stored(),
        tests_after=tests_after and tests_after.stored(), lint_after=lint_after and lint_after.stored(), files=files,
        test_files=changed_test_files(diff.files),
        additions=diff.stats.additions, deletions=diff.stats.deletions, commands_run=len(journal.commands),
        failed_commands=[{"command": c["command"], "exit_code": c["exit_code"]}
                         for c in journal.commands if not c["ok"]]
        # The tests after are the verdict under review (the base's failure is where the run started,
        # shown beside its own verdict); on an unchanged tree they are the base's, not run again.
        + failed_checks(("tests after", None if diff_unchanged else tests_after)),
        assumptions=list(result.assumptions), summary=result.summary, fixed_tests=list(flipped.fixed),
        broken_tests=list(flipped.broken), gone_tests=list(flipped.gone), skipped_tests=list(flipped.skipped))
    return replace(evidence, confidence=assess(evidence))


# ------------------------------------------------------------------ the agent, the end


def finalize(store: TaskStore, task_id: str, runs: list[Run], results: list[AgentResult],
             collected: list[tuple[Evidence, str]], *, caches: dict[str, Any] | None = None,
             order: list[int] | None = None) -> list[RunResult]:
    """Store each run's result (its patch, evidence, place in ``order`` — the round's
    ranking, :func:`rank` of the evidence unless given — and the caches it used) and move the
    task on: ready for review when the best attempt changed something; answered when none did
    but the best finished with an answer (the task asked a question); else failed. A run
    succeeded when it finished with a change to review or an answer. Returns the results, in
    run order."""
    order = rank([evidence for evidence, _ in collected]) if order is None else order
    stored: dict[int, RunResult] = {}
    for place, index in enumerate(order, start=1):
        result, (evidence, patch) = results[index], collected[index]
        usable = result.status == "finished" and bool(evidence.files)
        reported = result.status == "finished" and not evidence.files and bool(result.answer)
        detail = result.detail if usable or result.status != "finished" else (
            "finished with an answer and no change" if reported else "finished without changing anything")
        outcome = RunResult(status=result.status, detail=detail, summary=result.summary,
                            assumptions=list(result.assumptions), budget=result.budget, rank=place, patch=patch,
                            evidence=evidence.to_json(), spent=result.spent.to_json(), caches=caches or {})
        state = RunState.SUCCEEDED if usable or reported else RunState.FAILED
        store.finish_run(runs[index].id, state, outcome.to_json())
        stored[index] = outcome
    if len(order) > 1:
        store.append_event(task_id, None, "ranking", {
            "runs": [runs[i].id for i in order], "rule": RANKING_RULE})
    best = collected[order[0]][0]
    report = (results[order[0]].answer or "") if results[order[0]].status == "finished" else ""
    if best.files:
        store.set_state(task_id, TaskState.READY_FOR_REVIEW, expected=TaskState.RUNNING, event=(
            "ready_for_review", {"run_id": runs[order[0]].id, "confidence": best.confidence.level}))
    elif report:
        store.set_state(task_id, TaskState.ANSWERED, expected=TaskState.RUNNING, event=(
            "answered", {"run_id": runs[order[0]].id, "report": report}))
    else:
        reason = f"no attempt changed anything ({best.exit_status}: {best.exit_detail})"
        store.set_state(task_id, TaskState.FAILED, expected=TaskState.RUNNING, event=("failed", {"reason": reason}))
    return [stored[index] for index in range(len(results))]


#: The ranking in words, as the ranking event records it and the review pages state it.
RANKING_RULE = ("finished with a change, then tests passing after it, then higher confidence, then fewer "
                "changed lines; attempts equal on all four are placed by attempt number, the lower first")


def rank_key(item: Evidence) -> tuple[int, int, int, int]:
    """What :func:`rank` orders by, best lowest: two attempts with equal keys tie."""
    usable = item.exit_status == "finished" and bool(item.files)
    passing = item.tests_after is not None and item.tests_after.ok
    return (0 if usable else 1, 0 if passing else 1, {"high": 0, "medium": 1, "low": 2}[item.confidence.level],
            item.additions + item.deletions)


def rank(evidence: list[Evidence]) -> list[int]:
    """Indices of ``evidence`` (one per attempt, in attempt order) best first, by
    :data:`RANKING_RULE`: a tie goes to the lower attempt number, so equal attempts always
    rank the same way."""
    return sorted(range(len(evidence)), key=lambda index: (*rank_key(evidence[index]), index))

