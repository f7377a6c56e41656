"""Load alone must not fail work: a pip and an npm setup, from the real package registries through
errand's egress proxy, on a machine kept saturated: at least twice as many runnable tasks as cores,
topped up by busy loops started here (killed by pid, each bounded in time and ended with this test's
process) that run only while the rest of the machine leaves room for them.

At load 17-41, 8 of 22 npm setups failed with ``E400 … 400 Bad Request``: the proxy answered a
CONNECT head that took over 10 s to arrive, and logged nothing. Here each setup must succeed, and
its egress log, kept with the task, must show the registries reached and nothing refused.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from errand.tasks.lifecycle import TaskState
from errand.tasks.service import TaskService
from errand.tasks.store.tasks import TaskStore

from .harness import running_engine, scripted, wait_for_event, wait_for_state
from .projects import npm_project, python_project

pytestmark = [pytest.mark.slow, pytest.mark.network, pytest.mark.faults]

# A busy loop, bounded in time, and killed with the process that started it: a stopped one would
# otherwise wait forever for a SIGCONT that never comes. It says it is ready (its parent's death
# will kill it) before it may be stopped, and ends at once if that parent is already gone.
HOG = ("import ctypes, os, signal, sys, time\n"
       "ctypes.CDLL(None).prctl(1, signal.SIGKILL)\n"  # PR_SET_PDEATHSIG
       "if os.getppid() != int(sys.argv[2]):\n    sys.exit()\n"
       "os.write(1, b'r')\n"
       "os.close(1)\n"
       "end = time.monotonic() + float(sys.argv[1])\n"
       "while time.monotonic() < end:\n    pass\n")
HOG_SECONDS = 1200
TICK = 0.01  # seconds between looks at the machine's runnable tasks


def runnable() -> int:
    """Tasks runnable on the machine now (the kernel's ``procs_running``), not counting the caller."""
    with open("/proc/stat", encoding="ascii") as stat:
        for line in stat:
            if line.startswith("procs_running "):
                return int(line.split()[1]) - 1
    raise AssertionError("no procs_running in /proc/stat")


class Saturation:
    """At least ``target`` runnable tasks on the machine while it lasts: busy loops fill the gap the
    machine's own work leaves, and are stopped while that work fills it. Alone, they are the load;
    beside a busy test suite they mostly wait, and the suite's CPU is not taken twice (a fixed set
    of hogs took a third of two cores for the test's 40 s, on a machine already saturated)."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.hogs: list[subprocess.Popen[bytes]] = []
        try:
            for _ in range(target):
                self.hogs.append(subprocess.Popen([sys.executable, "-c", HOG, str(HOG_SECONDS), str(os.getpid())],
                                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL))
            for hog in self.hogs:  # each is ready to die with this process before any may be stopped
                assert hog.stdout is not None and hog.stdout.read() == b"r", f"busy loop {hog.pid} did not start"
                hog.stdout.close()
        except BaseException:
            self._end_hogs()
            raise
        self.running = len(self.hogs)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._hold, name="saturation", daemon=True)
        self._thread.start()

    def _hold(self) -> None:
        while not self._stop.wait(TICK):
            others = runnable() - self.running
            want = min(len(self.hogs), max(0, self.target - others))
            for hog in self.hogs[want:self.running]:
                hog.send_signal(signal.SIGSTOP)
            for hog in self.hogs[self.running:want]:
                hog.send_signal(signal.SIGCONT)
            self.running = want

    def held(self) -> bool:
        """Whether it still holds: its look goes on, and no hog has ended (each lives until the end)."""
        return self._thread.is_alive() and all(hog.poll() is None for hog in self.hogs)

    def __enter__(self) -> Saturation:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._end_hogs()

    def _end_hogs(self) -> None:
        for hog in self.hogs:
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
            with Saturation(2 * (os.cpu_count() or 1)) as saturation:
                ended = await asyncio.gather(*(
                    wait_for_event(store, task_id, lambda e: e.kind in ("setup_finished", "failed"), seconds=1500)
                    for task_id in tasks.values()))
                assert saturation.held()  # the machine stayed saturated throughout
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
