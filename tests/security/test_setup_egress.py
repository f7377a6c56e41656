"""Setup has an egress of its own: what `[setup] network` opens for installing, the agent and
the checks never get. Driven through the real engine against a test host that records every
request; the host's package-registry settings reach setup commands, and only them."""

from __future__ import annotations

from pathlib import Path

import pytest

import nethosts  # tests/nethosts.py: the security conftest puts tests/ on the path
from engine.harness import make_repo, running_engine, scripted, wait_for_state
from errand.tasks.lifecycle import TaskState
from errand.tasks.service import TaskService
from errand.tasks.store.tasks import TaskStore

FETCH = """\
import sys, urllib.request
try:
    urllib.request.urlopen(f"http://{host}/{sys.argv[1]}", timeout=20).read()
    print("reached")
except OSError as error:
    print("refused:", error)
"""


@pytest.mark.parametrize("isolation", ["namespace", "gvisor"])
async def test_what_setup_may_reach_the_agent_and_checks_may_not(
        tmp_path: Path, egress_hosts: nethosts.EgressHosts, public_host: nethosts.TestHost,
        isolation: str) -> None:
    host = nethosts.ALLOWED
    toml = (f'[setup]\ncommands = ["python3 fetch.py setup | grep reached"]\n'
            f'network = {{ domains = ["{host}"] }}\n'
            '[test]\ncommand = "python3 fetch.py checks"\n')
    repo = make_repo(tmp_path / "project", toml=toml, files={"fetch.py": FETCH.replace("{host}", host)})
    mark = public_host.mark()
    model = scripted([
        [("shell", {"command": "python3 fetch.py agent; printenv PIP_FIND_LINKS || echo no-pip"})],
        [("write_file", {"path": "note.txt", "content": "tried\n"})],
        [("finish", {"summary": "tried the network", "assumptions": []})],
    ])
    with TaskStore.open(f"sqlite:///{tmp_path / 'errand.db'}") as store:
        service = TaskService(store)
        task = service.submit("try", repo=repo, model="scripted:/dev/null")
        async with running_engine(store, lambda _s, _i: model, isolation=isolation):
            done = await wait_for_state(store, task.id, TaskState.READY_FOR_REVIEW, TaskState.FAILED)
        assert done.state is TaskState.READY_FOR_REVIEW, [e.data for e in store.events(task.id, kinds=["failed"])]
        agent_output = str(model.calls[1][0][-1].content)
    paths = [str(e.get("path")) for e in public_host.events(mark) if e.get("path")]
    assert "/setup" in paths
    assert "/agent" not in paths and "/checks" not in paths
    assert "reached" not in agent_output and "no-pip" in agent_output
