"""Model endpoints as a person meets them: real ``errand`` processes, a background worker started
with one endpoint in its environment, tasks handed to it with another, and two loopback servers
speaking the OpenAI wire protocol to tell where each request went."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import forkserver
from engine.harness import FIX_SCRIPT, make_repo, openai_turn
from errand.tasks.store.tasks import TaskStore
from models.wire import WireServer
from polling import until

pytestmark = pytest.mark.slow

BEE_KEY = "sk-bee-3f1c9a7e52d84b60a9e1c7d2f4b8a613"
_PROVIDER_VARIABLES = ("OPENAI_BASE_URL", "OPENAI_API_KEY", "ERRAND_OPENAI_BASE_URL", "ERRAND_OPENAI_API_KEY",
                       "ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY", "ERRAND_ANTHROPIC_BASE_URL",
                       "ERRAND_ANTHROPIC_API_KEY", "ERRAND_MODEL", "ERRAND_DATABASE_URL", "BEE_KEY")
DISTILLED = [("propose_memory", {"kind": "command", "text": "Run the tests with python3 test_calc.py"})]


def environment(home: Path, **variables: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _PROVIDER_VARIABLES}
    return {**env, "ERRAND_HOME": str(home), "COLUMNS": "200", **variables}


def errand(home: Path, *args: str, **variables: str) -> subprocess.CompletedProcess[str]:
    return forkserver.run([*args], timeout=180, env=environment(home, **variables))


def status(home: Path) -> dict[str, object]:
    shown = errand(home, "worker", "status", "--json")
    assert shown.returncode == 0, shown.stderr
    answer: dict[str, object] = json.loads(shown.stdout)
    return answer


def unwrapped(text: str) -> str:
    return " ".join(text.split())  # the console wraps long lines at its width


def wait_until(condition: Callable[[], bool], what: str, seconds: float = 120) -> None:
    until(condition, what, seconds)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    return home


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "project")


@pytest.fixture
def wires() -> Iterator[tuple[WireServer, WireServer]]:
    servers = (WireServer().start(), WireServer().start())
    yield servers
    for server in servers:
        server.stop()


@pytest.fixture
def start_worker(home: Path, tmp_path: Path) -> Iterator[Callable[..., forkserver.Process]]:
    """``errand worker`` in the background with the environment given; each is ended after the test."""
    started: list[forkserver.Process] = []

    def start(*args: str, **variables: str) -> forkserver.Process:
        with open(tmp_path / "worker.log", "ab") as log:
            worker = forkserver.start(["worker", *args], stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                      env=environment(home, **variables))
        started.append(worker)
        lock = home / "worker.lock"
        wait_until(lambda: lock.exists() and lock.read_text() == str(worker.pid), "the worker to take the lock")
        return worker

    yield start
    for worker in started:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
            worker.wait(60)


def settings(home: Path, bee_url: str) -> None:
    (home / "config.toml").write_text(f'[models.bee]\nprovider = "openai"\nmodel = "wire-model"\n'
                                      f'base_url = "{bee_url}/v1"\napi_key_env = "BEE_KEY"\n')


def queue_fix(wire: WireServer) -> None:
    for n, turn in enumerate([*FIX_SCRIPT, DISTILLED]):
        wire.answer(openai_turn(turn, n))


def test_a_named_model_reaches_its_endpoint_not_the_one_the_worker_started_with(
        home: Path, repo: Path, wires: tuple[WireServer, WireServer],
        start_worker: Callable[..., forkserver.Process]) -> None:
    a, b = wires
    settings(home, b.url)
    worker_env = {"OPENAI_BASE_URL": f"{a.url}/v1", "OPENAI_API_KEY": "sk-a", "BEE_KEY": BEE_KEY}
    worker = start_worker(**worker_env)
    queue_fix(b)

    ran = errand(home, "run", "Make test_calc.py pass", "--repo", str(repo), "--model", "bee", "-f", **worker_env)
    assert ran.returncode == 0, ran.stderr
    assert "ready for review" in ran.stdout and "started a background worker" not in ran.stdout
    assert a.requests == []
    assert [r.path for r in b.requests[:4]] == ["/v1/chat/completions"] * 4
    assert {r.headers["authorization"] for r in b.requests} == {f"Bearer {BEE_KEY}"}
    assert b.requests[0].body["model"] == "wire-model"

    [task] = json.loads(errand(home, "ls", "--json").stdout)
    shown = json.loads(errand(home, "show", task["id"], "--json").stdout)
    recorded = {k: v for k, v in shown["model_endpoint"].items() if k != "key_fingerprint"}
    assert (shown["model"], recorded) == ("bee", {"provider": "openai", "model": "wire-model",
                                                  "base_url": f"{b.url}/v1", "api_key_env": "BEE_KEY", "name": "bee",
                                                  "context_window": None, "pricing": None, "stream": False})
    line = f"model bee = openai:wire-model at {b.url}/v1, key $BEE_KEY"
    assert line in unwrapped(errand(home, "show", task["id"]).stdout)
    assert line in unwrapped(errand(home, "logs", task["id"]).stdout)
    stored = b"".join(path.read_bytes() for path in home.glob("errand.db*")) + (home / "worker.json").read_bytes()
    assert BEE_KEY.encode() not in stored  # the key is in no file errand wrote
    assert worker.poll() is None


def test_an_ad_hoc_model_goes_where_the_submitter_points_and_the_run_says_the_worker_differs(
        home: Path, repo: Path, wires: tuple[WireServer, WireServer],
        start_worker: Callable[..., forkserver.Process]) -> None:
    a, b = wires
    worker = start_worker(OPENAI_BASE_URL=f"{a.url}/v1", OPENAI_API_KEY="sk-wire")
    queue_fix(b)

    ran = errand(home, "run", "Make test_calc.py pass", "--repo", str(repo), "--model", "openai:wire-model", "-f",
                 OPENAI_BASE_URL=f"{b.url}/v1", OPENAI_API_KEY="sk-wire")
    assert ran.returncode == 0, ran.stderr
    assert "ready for review" in ran.stdout
    assert (f"warning: the running worker (pid {worker.pid}) was started with OPENAI_BASE_URL={a.url}/v1; "
            f"this task records and uses {b.url}/v1") in unwrapped(ran.stderr)
    assert a.requests == [] and len(b.requests) >= 4


def test_a_key_variable_the_worker_lacks_refuses_the_run_or_fails_the_task_whole(
        home: Path, repo: Path, wires: tuple[WireServer, WireServer],
        start_worker: Callable[..., forkserver.Process]) -> None:
    _, b = wires
    settings(home, b.url)
    queued = errand(home, "run", "Make test_calc.py pass", "--repo", str(repo), "--model", "bee", "--no-worker",
                    BEE_KEY=BEE_KEY)
    assert queued.returncode == 0, queued.stderr
    [task] = json.loads(errand(home, "ls", "--json").stdout)

    start_worker(OPENAI_API_KEY="sk-wire")  # started from a shell without $BEE_KEY
    wait_until(lambda: json.loads(errand(home, "show", task["id"], "--json").stdout)["state"] == "failed",
               "the task to fail")
    assert "$BEE_KEY" in errand(home, "logs", task["id"]).stdout
    with TaskStore.open(f"sqlite:///{home / 'errand.db'}") as store:
        [failed] = store.events(task["id"], kinds=["failed"])
        assert failed.data["code"] == "model_key_missing"
        assert store.runs(task["id"]) == []  # no run, no working copy, no sandbox
    assert b.requests == [] and not list((home / "work").glob("*"))

    refused = errand(home, "run", "Make test_calc.py pass", "--repo", str(repo), "--model", "bee", BEE_KEY=BEE_KEY)
    assert refused.returncode == 2
    assert "started without $BEE_KEY" in unwrapped(refused.stderr) and "errand worker stop" in refused.stderr
    assert len(json.loads(errand(home, "ls", "--json").stdout)) == 1  # nothing was queued


def test_worker_status_and_stop(home: Path, repo: Path, tmp_path: Path, wires: tuple[WireServer, WireServer],
                                start_worker: Callable[..., forkserver.Process]) -> None:
    a, b = wires
    settings(home, b.url)
    assert status(home) == {"running": False, "home": str(home), "keys": [], "tasks": []}
    worker = start_worker("--concurrency", "3", OPENAI_BASE_URL=f"{a.url}/v1", OPENAI_API_KEY="sk-a",
                          BEE_KEY=BEE_KEY)
    script = tmp_path / "long.json"
    script.write_text(json.dumps([{"tool_calls": [{"name": "shell", "arguments": {"command": "sleep 600"}}]}]))
    ran = errand(home, "run", "Wait a while", "--repo", str(repo), "--model", f"scripted:{script}")
    assert ran.returncode == 0, ran.stderr
    [task] = json.loads(errand(home, "ls", "--json").stdout)
    wait_until(lambda: status(home)["tasks"] == [task["id"]], "the worker to hold the task")

    shown = status(home)
    assert (shown["running"], shown["pid"], shown["concurrency"]) == (True, worker.pid, 3)
    assert shown["base_urls"] == {"OPENAI_BASE_URL": f"{a.url}/v1"}
    assert shown["keys"] == ["BEE_KEY", "OPENAI_API_KEY"]
    assert shown["models"] == {"bee": f"bee = openai:wire-model at {b.url}/v1, key $BEE_KEY"}
    assert isinstance(shown["started_at"], float) and shown["started_at"] <= time.time()
    text = unwrapped(errand(home, "worker", "status").stdout)
    assert f"worker pid {worker.pid} serves {home}" in text and task["id"] in text and "$BEE_KEY" in text
    assert BEE_KEY not in text

    stopped = errand(home, "worker", "stop")
    assert stopped.returncode == 0, stopped.stderr
    assert f"stopped the worker (pid {worker.pid})\n  {task['id']}: requeued" in stopped.stdout
    assert worker.wait(60) == 0  # it exited cleanly, by itself
    assert json.loads(errand(home, "show", task["id"], "--json").stdout)["state"] == "queued"
    assert status(home)["running"] is False and not (home / "worker.json").exists()
    again = errand(home, "worker", "stop")
    assert again.returncode == 0 and "no worker serves" in again.stdout


def test_a_worker_running_other_code_or_another_tier_is_said_at_submission(
        home: Path, repo: Path, start_worker: Callable[..., forkserver.Process]) -> None:
    worker = start_worker(ERRAND_ISOLATION="namespace")
    record = home / "worker.json"
    wait_until(record.exists, "the worker to write its record")
    # As if it had been started before an upgrade: its record names other code.
    data = json.loads(record.read_text())
    record.write_text(json.dumps({**data, "code": "0.0.9+0123456789ab"}))
    script = repo.parent / "noop.json"
    script.write_text(json.dumps([{"tool_calls": [{"name": "finish", "arguments": {"summary": "nothing"}}]}]))
    ran = errand(home, "run", "look", "--repo", str(repo), "--model", f"scripted:{script}",
                 ERRAND_ISOLATION="gvisor")
    assert ran.returncode == 0, ran.stderr
    said = unwrapped(ran.stderr)
    assert f"the running worker (pid {worker.pid}) runs errand 0.0.9+0123456789ab, not this errand" in said
    assert "runs tasks on namespace sandboxes, not gvisor as ERRAND_ISOLATION says here" in said
