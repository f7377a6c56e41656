"""Load alone must not fail work: a pip and an npm setup, from the real package registries through
errand's egress proxy, on a machine saturated with CPU hogs (twice as many busy loops as cores,
started here and killed by pid, each bounded in time).

At load 17-41, 8 of 22 npm setups failed with ``E400 … 400 Bad Request``: the proxy answered a
CONNECT head that took over 10 s to arrive, and logged nothing. Here each setup must succeed, and
its egress log, kept with the task, must show the registries reached and nothing refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from errand.tasks.lifecycle import TaskState
from errand.tasks.service import TaskService
from errand.tasks.store.tasks import TaskStore

from .harness import running_engine, scripted, wait_for_event, wait_for_state
from .projects import npm_project, python_project

pytestmark = [pytest.mark.slow, pytest.mark.network, pytest.mark.faults]

HOG = "import sys, time\nend = time.monotonic() + float(sys.argv[1])\nwhile time.monotonic() < end:\n    pass\n"
HOG_SECONDS = 1200  # a hog ends by itself even if this test's process dies before killing it


@contextlib.contextmanager
def cpu_hogs(count: int) -> Iterator[list[subprocess.Popen[bytes]]]:
    hogs = [subprocess.Popen([sys.executable, "-c", HOG, str(HOG_SECONDS)]) for _ in range(count)]
    try:
        yield hogs
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def _why(store: TaskStore, task_id: str) -> list[dict[str, object]]:
    return [event.data for event in store.events(task_id, kinds=["failed"])]


async def test_setups_from_the_registries_succeed_on_a_saturated_machine(tmp_path: Path) -> None:
    """A pip and an npm project set up at once, under the same hogs: each hog's CPU is the suite's too,
    and the two setups load the machine further, each the other's."""
    repos = {"pip": python_project(tmp_path / "pip"), "npm": npm_project(tmp_path / "npm")}
    turns = [[("write_file", {"path": "NOTES.md", "content": "set up under load\n"})],
             [("finish", {"summary": "a note", "assumptions": []})]]
    with TaskStore.open(f"sqlite:///{tmp_path / 'errand.db'}") as store:
        service = TaskService(store)
        tasks = {project: service.submit("Leave a note", repo=repo, model="scripted:/dev/null").id
                 for project, repo in repos.items()}
        async with running_engine(store, lambda _s, _i: scripted(turns), concurrency=2):
            with cpu_hogs(2 * (os.cpu_count() or 1)) as hogs:
                ended = await asyncio.gather(*(
                    wait_for_event(store, task_id, lambda e: e.kind in ("setup_finished", "failed"), seconds=1500)
                    for task_id in tasks.values()))
                assert all(hog.poll() is None for hog in hogs)  # the machine stayed saturated throughout
            for (project, task_id), end in zip(tasks.items(), ended, strict=True):
                assert end.kind == "setup_finished", (project, _why(store, task_id))
            for project, task_id in tasks.items():
                done = await wait_for_state(store, task_id, TaskState.READY_FOR_REVIEW, TaskState.FAILED, seconds=900)
                assert done.state is TaskState.READY_FOR_REVIEW, (project, _why(store, task_id))
        for project, task_id in tasks.items():
            [setup] = [e.data for e in store.events(task_id, kinds=["egress"]) if e.data["role"] == "setup"]
            assert setup["refused"] == [] and setup["more_refused"] == 0, (project, setup["refused"])
            reached = {host["port"]: host for host in setup["hosts"]}
            assert reached[443]["connections"] >= 1 and reached[443]["bytes_in"] > 0, (project, setup["hosts"])
