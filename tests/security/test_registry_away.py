"""A package index away while a task sets up, past pip's own retries, then back: the task fails
saying the index could not be reached and what to do, and a retry once it is back reaches review.

The index is a real one in the PEP 503 layout, served by ``python -m http.server`` inside a test
host's network namespace, with a wheel built here; "away" is nothing listening on its port, as
when a team's index or mirror is down. The setup installs from it with pip's defaults.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import nethosts  # tests/nethosts.py: the security conftest puts tests/ on the path
from engine.harness import FIX_SCRIPT, make_repo, running_engine, scripted, wait_for_state
from errand.tasks.lifecycle import TaskState
from errand.tasks.service import TaskService
from errand.tasks.store.tasks import TaskStore
from polling import settled

pytestmark = [pytest.mark.faults, pytest.mark.slow]

INDEX = "index.errand.test"
PORT = 8081


def _wheel(directory: Path) -> Path:
    """A wheel of ``tinypkg`` 1.0, one module, as a build backend would write it."""
    files = {"tinypkg/__init__.py": b"ANSWER = 42\n",
             "tinypkg-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: tinypkg\nVersion: 1.0\n",
             "tinypkg-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: errand-tests\nRoot-Is-Purelib: true\n"
                                           b"Tag: py3-none-any\n"}
    record = "".join(f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},"
                     f"{len(data)}\n" for name, data in files.items()) + "tinypkg-1.0.dist-info/RECORD,,\n"
    wheel = directory / "tinypkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
        archive.writestr("tinypkg-1.0.dist-info/RECORD", record)
    return wheel


def _index(root: Path) -> Path:
    """A PEP 503 simple index holding the wheel: /simple/tinypkg/ links /packages/<wheel>."""
    (root / "packages").mkdir(parents=True)
    wheel = _wheel(root / "packages")
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    (root / "simple" / "tinypkg").mkdir(parents=True)
    (root / "simple" / "index.html").write_text('<a href="tinypkg/">tinypkg</a>\n')
    (root / "simple" / "tinypkg" / "index.html").write_text(
        f'<a href="../../packages/{wheel.name}#sha256={digest}">{wheel.name}</a>\n')
    return root


@contextlib.contextmanager
def serving(host: nethosts.TestHost, root: Path) -> Iterator[None]:
    """The index served on PORT inside the test host's namespace until the block ends (killed by pid)."""
    server = subprocess.Popen(["ip", "netns", "exec", host.netns, sys.executable, "-m", "http.server", str(PORT),
                               "--bind", host.ipv4, "--directory", str(root)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        listening = f"ip netns exec {host.netns} ss -Hltn sport = :{PORT}"
        settled(lambda: subprocess.run(listening.split(), capture_output=True, text=True).stdout.strip() != "", 30)
        yield
    finally:
        server.kill()
        server.wait()


async def test_an_index_away_past_pips_retries_fails_the_setup_saying_so_and_a_retry_once_it_is_back_passes(
        tmp_path: Path, egress_hosts: nethosts.EgressHosts) -> None:
    egress_hosts.add(INDEX, egress_hosts.public.ipv4)
    root = _index(tmp_path / "index")
    url = f"http://{INDEX}:{PORT}/simple/"
    install = f".venv/bin/pip install --index-url {url} --trusted-host {INDEX} tinypkg"  # pip's retries, as given
    toml = (f'[setup]\ncommands = ["python3 -m venv .venv", "{install}"]\n'
            f'network = {{ domains = ["{INDEX}:{PORT}"] }}\n'
            '[test]\ncommand = ".venv/bin/python -c \'import tinypkg; assert tinypkg.ANSWER == 42\' && '
            'python3 test_calc.py"\n')
    repo = make_repo(tmp_path / "project", toml=toml)
    with TaskStore.open(f"sqlite:///{tmp_path / 'errand.db'}") as store:
        service = TaskService(store)
        task = service.submit("fix", repo=repo, model="scripted:/dev/null")
        model = scripted(FIX_SCRIPT)
        async with running_engine(store, lambda _s, _i: model):
            done = await wait_for_state(store, task.id, TaskState.FAILED, TaskState.READY_FOR_REVIEW)
        assert done.state is TaskState.FAILED and model.calls == []
        [failed] = store.events(task.id, kinds=["failed"])
        assert failed.data["code"] == "setup_failed", failed.data
        assert "ERROR: No matching distribution found for tinypkg" in failed.data["log"]  # all pip says
        assert f"{INDEX}:{PORT} did not answer (down or unreachable" in failed.data["reason"], failed.data
        assert "`errand retry` the task once it is back" in failed.data["reason"]
        [logged] = store.events(task.id, kinds=["egress"])
        [unanswered] = [r for r in logged.data["refusal_counts"] if (r["host"], r["port"]) == (INDEX, PORT)]
        assert unanswered["count"] > 1  # pip retried the outage it was told of, as it would going direct

        with serving(egress_hosts.public, root):
            service.retry(task.id)
            async with running_engine(store, lambda _s, _i: scripted(FIX_SCRIPT)):
                done = await wait_for_state(store, task.id, TaskState.READY_FOR_REVIEW, TaskState.FAILED)
        assert done.state is TaskState.READY_FOR_REVIEW, [e.data for e in store.events(task.id, kinds=["failed"])]
        evidence = service.evidence(service.chosen_run(task.id))
        assert evidence is not None and evidence.tests_after is not None and evidence.tests_after.ok
