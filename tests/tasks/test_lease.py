"""One store, one engine at a time: a local engine refuses a store the Temporal engine serves
(it would take the runs Temporal's workers hold for abandoned and requeue them), and the
Temporal dispatcher refuses a store a local engine serves; either serves once the other left. A
worker lives by its lease, and a renewal after the lease passed says so."""

from __future__ import annotations

import asyncio
import errno
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from engine.cli import errand
from errand import _settings
from errand.tasks.engines.lease import (
    TEMPORAL_PREFIX,
    _renew_unexpired,
    lease_lives,
    new_worker_id,
    temporal_lease,
)
from errand.tasks.engines.local import LocalEngine
from errand.tasks.engines.temporal import TemporalSettings
from errand.tasks.engines.temporal.dispatch import Dispatcher
from errand.tasks.errors import EnginesMixed
from errand.tasks.records import RunState
from errand.tasks.service import TaskService
from errand.tasks.store.tasks import TaskStore

TEMPORAL_WORKER = f"{TEMPORAL_PREFIX}errand-worker-elsewhere-0123456789"


def _running_on_temporal(store: TaskStore, service: TaskService, repo: Path) -> str:
    """A task whose run a Temporal worker holds (its run's worker is the worker's queue)."""
    script = repo.parent / "script.json"
    script.write_text("[]")
    task = service.submit("Make test_calc.py pass", repo=repo, model=f"scripted:{script}")
    assert store.claim_next("temporal:dispatcher") is not None
    run = store.start_run(task.id, "errand-worker-elsewhere-0123456789")
    store.register_worker(TEMPORAL_WORKER, home="temporal", lease=600)
    return run.id


async def test_a_local_engine_refuses_a_store_the_temporal_engine_serves_and_leaves_its_runs_alone(
        store: TaskStore, service: TaskService, repo: Path) -> None:
    run_id = _running_on_temporal(store, service, repo)
    with pytest.raises(EnginesMixed, match="served by the temporal engine") as refused:
        await LocalEngine(store, memory=None).serve(exit_when_idle=0.1)
    assert refused.value.code == "engines_mixed" and "ERRAND_DATABASE_URL" in refused.value.message
    assert store.get_run(run_id).state is RunState.RUNNING  # not taken for a dead worker's
    assert store.live_workers() == [TEMPORAL_WORKER]  # the refused engine left no lease behind


async def test_a_local_engine_serves_once_the_temporal_engine_left(store: TaskStore, service: TaskService,
                                                                   repo: Path) -> None:
    _running_on_temporal(store, service, repo)
    store.release_worker(TEMPORAL_WORKER)
    await asyncio.wait_for(LocalEngine(store, memory=None).serve(exit_when_idle=0.1), 60)


async def test_the_temporal_dispatcher_refuses_a_store_a_local_engine_serves(store: TaskStore) -> None:
    store.register_worker("build-host:4242", home="build-host:/var/lib/errand", lease=600)
    dispatcher = Dispatcher(store, TemporalSettings("127.0.0.1:9"))  # refused before it connects anywhere
    with pytest.raises(EnginesMixed, match="served by the local engine"):
        await dispatcher.serve()
    assert store.live_workers() == ["build-host:4242"]


def test_errand_worker_says_the_store_is_the_temporal_engines_and_exits(
        tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("ERRAND_HOME", str(home))
    monkeypatch.delenv("ERRAND_DATABASE_URL", raising=False)
    with TaskStore.open() as store:  # the home's own store, the one `errand worker` opens
        run_id = _running_on_temporal(store, TaskService(store, memory=None), repo)
    refused = errand(home, "worker", "--exit-when-idle", "1", timeout=120)
    assert refused.returncode == 1, refused.stderr
    assert refused.stderr.startswith("error: the store") and "served by the temporal engine" in refused.stderr
    assert "(local engine)" not in refused.stderr  # refused before it says it serves anything
    with TaskStore.open() as store:
        assert store.get_run(run_id).state is RunState.RUNNING


async def test_a_worker_lives_by_its_lease_renewed_and_is_gone_once_it_passed_or_was_released(
        store: TaskStore) -> None:
    """What the Temporal workflow asks before it takes a silent attempt for lost. (A lease of 0.6 s
    once passed unrenewed in CI, its renewals held up on a saturated machine: the live one's lease
    is long enough to be renewed there; the silent one's passing takes as long.)"""
    lease = 5.0
    async with temporal_lease(store, f"{TEMPORAL_PREFIX}alive", lease):  # renewed every third of the lease
        assert await asyncio.to_thread(lease_lives, store, f"{TEMPORAL_PREFIX}alive", lease)
    store.register_worker(f"{TEMPORAL_PREFIX}silent", home="temporal", lease=lease)  # never renewed
    assert not await asyncio.to_thread(lease_lives, store, f"{TEMPORAL_PREFIX}silent", lease)
    assert not await asyncio.to_thread(lease_lives, store, f"{TEMPORAL_PREFIX}alive", lease)  # released


def test_a_lease_renewed_after_it_passed_says_so(store: TaskStore) -> None:
    store.register_worker("temporal:w", home="temporal", lease=30)
    assert _renew_unexpired(store, "temporal:w", 30)
    store.register_worker("temporal:w", home="temporal", lease=-1)  # as a worker stalled past its lease
    assert not _renew_unexpired(store, "temporal:w", 30)


def test_two_homes_at_one_path_on_one_host_are_two_homes_to_the_store_and_to_temporal(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Containers that share the host's network have one host name; each mounts a volume of its own
    at the same path for its home. Two such homes are told apart by the id each was given, in the
    store's worker leases (whose home a starting worker takes for ended) and in Temporal's queues
    (which route a round to the home holding its working copies)."""
    home = tmp_path / "home"
    monkeypatch.setenv("ERRAND_HOME", str(home))
    first, first_queue = _settings.home_identity(), TemporalSettings("", prefix="e").worker_queue()
    assert _settings.home_identity() == first and TemporalSettings("", prefix="e").worker_queue() == first_queue
    home.rename(tmp_path / "unmounted")  # the first container's volume goes...
    home.mkdir()  # ...and another's is mounted at the same path
    assert _settings.home_identity() != first
    assert TemporalSettings("", prefix="e").worker_queue() != first_queue
    assert _settings.home_id(tmp_path / "unmounted") == first.rpartition("#")[2]  # the first keeps its id


def test_a_home_is_given_one_id_however_many_processes_ask_at_once(tmp_path: Path) -> None:
    ask = ("import sys; from pathlib import Path; from errand import _settings; "
           "print(_settings.home_id(Path(sys.argv[1])))")
    asking = [subprocess.Popen([sys.executable, "-c", ask, str(tmp_path / "home")], stdout=subprocess.PIPE, text=True)
              for _ in range(8)]
    answers = {process.communicate(timeout=60)[0].strip() for process in asking}
    assert len(answers) == 1 and len(answers.pop()) == 16
    assert sorted(path.name for path in (tmp_path / "home").iterdir()) == ["id"]  # no partial file left


@pytest.mark.parametrize("left", ["", "\0" * 16, "3f2a9c"], ids=["empty", "zeroes", "cut short"])
def test_a_home_whose_id_a_crash_left_unwritten_is_named_again_once_however_many_ask(tmp_path: Path, left: str) -> None:
    """The id file's name reached the disk and its content did not (a power cut before the page was
    written): an id of "" would make every such home one. Eight processes find it so at once; all
    take the one new id, which the file then holds."""
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "id").write_text(left)
    ask = ("import sys; from pathlib import Path; from errand import _settings; "
           "print(_settings.home_id(Path(sys.argv[1])))")
    asking = [subprocess.Popen([sys.executable, "-c", ask, str(tmp_path / "home")], stdout=subprocess.PIPE, text=True)
              for _ in range(8)]
    answers = {process.communicate(timeout=60)[0].strip() for process in asking}
    assert len(answers) == 1, answers
    [named] = answers
    assert re.fullmatch(r"[0-9a-f]{16}", named) and named == (tmp_path / "home" / "id").read_text().strip()
    assert _settings.home_id(tmp_path / "home") == named
    assert sorted(path.name for path in (tmp_path / "home").iterdir()) == ["id"]


def test_a_home_s_new_id_is_on_the_disk_under_its_name_before_it_is_used(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The id's content is synced before it is named, and the name (the home's directory) before
    the id is returned: one lost to a power cut would give the home another id on the next start,
    and another Temporal queue, leaving its rounds in flight unpolled."""
    home = tmp_path / "home"
    home.mkdir()
    done: list[str] = []
    link, fsync = os.link, os.fsync

    def linking(source: str | os.PathLike[str], target: str | os.PathLike[str]) -> None:
        link(source, target)
        done.append("link")

    def syncing(fd: int) -> None:
        fsync(fd)
        done.append("sync home" if os.fstat(fd).st_ino == home.stat().st_ino else "sync id")

    monkeypatch.setattr(os, "link", linking)
    monkeypatch.setattr(os, "fsync", syncing)
    _settings.home_id(home)
    assert done == ["sync id", "link", "sync home"]


@pytest.mark.parametrize("left", [None, ""], ids=["none yet", "empty"])
def test_a_home_whose_disk_is_full_is_given_no_id_and_left_no_partial_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, left: str | None) -> None:
    """The new id cannot reach the disk (full, or over quota: the write or its fsync fails): home_id
    says so, and leaves no half-written ``.id.*`` beside the id, one more each time errand starts."""
    (tmp_path / "home").mkdir()
    if left is not None:
        (tmp_path / "home" / "id").write_text(left)

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    for _ in range(3):
        with pytest.raises(OSError, match="No space left"):
            _settings.home_id(tmp_path / "home")
    assert sorted(path.name for path in (tmp_path / "home").iterdir()) == ([] if left is None else ["id"])


def test_workers_of_one_host_name_and_pid_are_named_apart() -> None:
    """Host and pid repeat where each container runs errand as pid 1 on the host's network, and for a
    worker restarted so; a worker's name does not. Ten thousand names: a random part of 24 bits
    meets itself among them nineteen times in twenty (it did among 100 once, in CI); one of 64 bits,
    about once in 10^11."""
    assert len({new_worker_id() for _ in range(10_000)}) == 10_000



def test_a_home_named_by_another_between_its_look_and_its_naming_keeps_the_others_name(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The race the test above rarely meets (eight processes seldom fall into the same microseconds:
    a home_id that just wrote the file, last writer winning, passes it): another process names the
    home after this one found no name and before it names it. Both must say the other's first name."""
    home = tmp_path / "home"
    token_hex = _settings.secrets.token_hex
    others: list[str] = []

    def other_first(length: int) -> str:
        if not others:  # this caller found no id; another process names the home now, to its end
            others.append("")
            others[0] = _settings.home_id(home)
        return token_hex(length)

    monkeypatch.setattr(_settings.secrets, "token_hex", other_first)
    assert _settings.home_id(home) == others[0] != ""
    monkeypatch.undo()
    assert _settings.home_id(home) == others[0]
    assert sorted(path.name for path in home.iterdir()) == ["id"]
