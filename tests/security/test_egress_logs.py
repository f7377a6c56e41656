"""Setup's and each run's egress log, where a person reads it: ``errand logs``, ``errand show`` and
the task page. Driven through the real engine against a test host; setup reaches the host its
``[setup] network`` allows and is refused another, the agent is refused the setup's host."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

import nethosts  # tests/nethosts.py: the security conftest puts tests/ on the path
from engine.harness import make_repo, running_engine, scripted, wait_for_state
from errand.server.app import create_app
from errand.server.config import ServerConfig
from errand.tasks.lifecycle import TaskState
from errand.tasks.service import TaskService
from errand.tasks.store.tasks import TaskStore

FETCH = """\
import sys, urllib.request
for url in sys.argv[1:]:
    try:
        urllib.request.urlopen(url, timeout=20).read()
        print("reached", url)
    except OSError as error:
        print("refused", url, error)
"""


@pytest.mark.faults
async def test_setup_and_run_egress_logs_are_shown_in_logs_show_and_the_page(
        tmp_path: Path, egress_hosts: nethosts.EgressHosts, public_host: nethosts.TestHost) -> None:
    host = nethosts.ALLOWED
    toml = (f'[setup]\ncommands = ["python3 fetch.py http://{host}/setup http://not-listed.test/"]\n'
            f'network = {{ domains = ["{host}"] }}\n')
    repo = make_repo(tmp_path / "project", toml=toml, files={"fetch.py": FETCH})
    model = scripted([
        [("shell", {"command": f"python3 fetch.py http://{host}/agent"})],
        [("write_file", {"path": "note.txt", "content": "tried\n"})],
        [("finish", {"summary": "tried the network", "assumptions": []})],
    ])
    url = f"sqlite:///{tmp_path / 'errand.db'}"
    with TaskStore.open(url) as store:
        service = TaskService(store)
        task = service.submit("try", repo=repo, model="scripted:/dev/null")
        async with running_engine(store, lambda _s, _i: model):
            done = await wait_for_state(store, task.id, TaskState.READY_FOR_REVIEW, TaskState.FAILED)
        assert done.state is TaskState.READY_FOR_REVIEW, [e.data for e in store.events(task.id, kinds=["failed"])]
        logged = {e.data["role"]: e.data for e in store.events(task.id, kinds=["egress"])}

    setup, agent = logged["setup"], logged["agent"]
    [reached] = setup["hosts"]
    assert (reached["host"], reached["port"], reached["connections"]) == (host, 80, 1) and reached["bytes_in"] > 0
    assert [(r["host"], r["reason"]) for r in setup["refused"]] == [("not-listed.test", "domain not in the allowlist")]
    assert agent["hosts"] == [] and [r["host"] for r in agent["refused"]] == [host]

    env = {**os.environ, "ERRAND_DATABASE_URL": url, "COLUMNS": "250"}
    errand = [sys.executable, "-m", "errand"]
    logs = subprocess.run([*errand, "logs", task.id], capture_output=True, text=True, env=env, check=True).stdout
    shown = subprocess.run([*errand, "show", task.id], capture_output=True, text=True, env=env, check=True).stdout
    shown_json = json.loads(subprocess.run([*errand, "show", task.id, "--json"], capture_output=True, text=True,
                                           env=env, check=True).stdout)
    for text in (logs, shown):
        assert "egress of the setup sandbox: 1 connection to 1 host" in text, text
        assert "not-listed.test:80: domain not in the allowlist" in text, text
        assert "egress of the agent sandbox: 0 connections to 0 hosts, 1 refusal" in text, text
    assert {entry["role"] for entry in shown_json["egress"]} >= {"setup", "agent"}

    with TestClient(create_app(ServerConfig(run_engine=False), database_url=url),
                    base_url="http://127.0.0.1:8470") as client:
        page = client.get(f"/tasks/{task.id}")
    assert page.status_code == 200
    assert "egress of the setup sandbox" in page.text and "not-listed.test:80: domain not in the allowlist" in page.text


@pytest.mark.faults
async def test_a_setup_that_failed_on_a_refusal_says_so(tmp_path: Path, egress_hosts: nethosts.EgressHosts) -> None:
    toml = ('[setup]\ncommands = ["python3 fetch.py http://not-listed.test/ | grep reached"]\n'
            f'network = {{ domains = ["{nethosts.ALLOWED}"] }}\n')
    repo = make_repo(tmp_path / "project", toml=toml, files={"fetch.py": FETCH})
    with TaskStore.open(f"sqlite:///{tmp_path / 'errand.db'}") as store:
        service = TaskService(store)
        task = service.submit("try", repo=repo, model="scripted:/dev/null")
        async with running_engine(store, lambda _s, _i: scripted([])):
            done = await wait_for_state(store, task.id, TaskState.READY_FOR_REVIEW, TaskState.FAILED)
        [failed] = store.events(task.id, kinds=["failed"])
        [logged] = store.events(task.id, kinds=["egress"])
    assert done.state is TaskState.FAILED
    assert "the egress proxy refused 1 connection of it" in failed.data["reason"], failed.data
    assert "registry" not in failed.data["reason"]  # not-listed.test is none of the host's registries
    assert [r["reason"] for r in logged.data["refused"]] == ["domain not in the allowlist"]
    assert logged.id < failed.id  # the log is there to read when the failure is reported


@pytest.mark.faults
async def test_a_setup_refused_a_host_of_the_hosts_registries_is_told_how_to_reach_it(
        tmp_path: Path, egress_hosts: nethosts.EgressHosts, monkeypatch: pytest.MonkeyPatch) -> None:
    # The host's pip configuration names the index setup was refused (the test host stands in for it).
    from errand.sandbox.registries import RegistryAccess
    from errand.tasks.round import egress_log

    monkeypatch.setattr(egress_log, "host_registries", lambda kinds: RegistryAccess(
        domains=("not-listed.test",) if list(kinds) == ["pip"] else ()))
    toml = ('[setup]\ncommands = ["python3 fetch.py http://not-listed.test/ | grep reached"]\n'
            f'network = {{ domains = ["{nethosts.ALLOWED}"], registries = ["apt"] }}\n')
    repo = make_repo(tmp_path / "project", toml=toml, files={"fetch.py": FETCH})
    with TaskStore.open(f"sqlite:///{tmp_path / 'errand.db'}") as store:
        task = TaskService(store).submit("try", repo=repo, model="scripted:/dev/null")
        async with running_engine(store, lambda _s, _i: scripted([])):
            done = await wait_for_state(store, task.id, TaskState.READY_FOR_REVIEW, TaskState.FAILED)
        [failed] = store.events(task.id, kinds=["failed"])
    assert done.state is TaskState.FAILED
    assert ('pip registry hosts among them: setup reaches them with `registries = ["apt", "pip"]` in '
            "errand.toml's [setup] network table") in failed.data["reason"], failed.data
