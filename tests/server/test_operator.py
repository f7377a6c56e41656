"""What an operator's tools see of a real ``errand serve``: the health probes and Prometheus's scrape."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

import components
import forkserver
from engine.harness import FIX_SCRIPT
from models.wire import WireServer
from postgres import BIN, Cluster, _as_owner
from temporal import TemporalServer

from .conftest import Served, free_port, queue_turns, wait_state

TOKEN = "operator-token-0123456789"


def scrape(client: httpx.Client) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of ``/metrics`` by name and labels, parsed by Prometheus's own parser."""
    response = client.get("/metrics")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=")
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(response.text) for sample in family.samples}


def wait_ready(client: httpx.Client, *, ready: bool, seconds: float = 60) -> dict[str, object]:
    deadline = time.monotonic() + seconds
    while True:
        response = client.get("/readyz")
        body: dict[str, object] = response.json()
        if (response.status_code == 200) == ready:
            assert body["status"] == ("ready" if ready else "not ready")
            return body
        assert time.monotonic() < deadline, f"/readyz stayed {response.status_code}: {body}"
        time.sleep(0.1)


def test_a_task_shows_in_the_metrics(serve: Callable[..., Served], wire: WireServer, repo: Path) -> None:
    queue_turns(wire, FIX_SCRIPT)
    served = serve()
    with served.client() as client:
        assert client.get("/healthz").json() == {"status": "ok"}
        ready = wait_ready(client, ready=True)
        assert ready["checks"] == {"store": {"ok": True, "detail": "answers"},
                                   "engine": {"ok": True, "detail": "running"}}
        before = scrape(client)
        assert before[("errand_tasks", (("state", "ready_for_review"),))] == 0

        task = client.post("/api/tasks", json={"instruction": "Make test_calc.py pass", "repo": str(repo),
                                               "model": "openai:wire-model"}).json()
        wait_state(client, task["id"], "ready_for_review")
        after = scrape(client)
        model_events = [event for event in client.get(f"/api/tasks/{task['id']}/events").json()
                        if event["kind"] == "model"]

    assert after[("errand_tasks", (("state", "ready_for_review"),))] == 1
    assert after[("errand_tasks", (("state", "queued"),))] == 0
    assert after[("errand_queue_age_seconds", ())] == 0
    # Every model call the wire server answered with a turn (100 prompt and 20 completion tokens each).
    calls = len(model_events)
    assert calls == len(FIX_SCRIPT)
    assert after[("errand_model_calls_total", ())] == calls
    assert after[("errand_model_tokens_total", (("direction", "input"),))] == 100 * calls
    assert after[("errand_model_tokens_total", (("direction", "output"),))] == 20 * calls
    assert after[("errand_events_total", (("kind", "ready_for_review"),))] == 1
    assert after[("errand_run_duration_seconds_count", ())] == 1
    assert after[("errand_run_duration_seconds_bucket", (("le", "+Inf"),))] == 1
    assert after[("errand_run_duration_seconds_sum", ())] > 0
    assert after[("errand_workers_live", ())] >= 1
    assert ("errand_sandboxes_live", ()) in after
    assert ("errand_egress_refusals_total", ()) in after


def test_metrics_want_the_token_and_the_probes_do_not(serve: Callable[..., Served]) -> None:
    served = serve(token=TOKEN)
    with httpx.Client(base_url=served.url, timeout=30) as anonymous:
        refused = anonymous.get("/metrics", follow_redirects=False)
        assert refused.status_code == 401
        assert refused.json()["code"] == "unauthorized"
        assert anonymous.get("/healthz").status_code == 200
        body = wait_ready(anonymous, ready=True)
        assert set(body) == {"status", "checks"}  # which dependency, and nothing of the tasks
    with served.client(TOKEN) as client:
        assert ("errand_tasks", (("state", "queued"),)) in scrape(client)


def test_not_ready_while_another_worker_serves_the_home(serve: Callable[..., Served], tmp_path: Path) -> None:
    database = f"sqlite:///{tmp_path / 'errand.db'}"
    worker = subprocess.Popen([sys.executable, "-m", "errand", "worker"], env=_env(database),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        _wait_for_line(worker, "worker")
        served = serve()
        with served.client() as client:
            body = wait_ready(client, ready=False)
            engine = body["checks"]["engine"]  # type: ignore[index]
            assert engine["ok"] is False
            assert engine["detail"].startswith("refused: ")
            assert client.get("/healthz").status_code == 200  # alive: restarting it would not help
    finally:
        worker.terminate()
        worker.wait(60)
    with served.client() as client:
        wait_ready(client, ready=True)  # it takes over once the worker is gone


def test_not_ready_when_temporal_does_not_answer(serve: Callable[..., Served]) -> None:
    nobody = f"127.0.0.1:{free_port()}"
    served = serve("--engine", "temporal", "--temporal", nobody)
    with served.client() as client:
        body = wait_ready(client, ready=False)
        temporal = body["checks"]["temporal"]  # type: ignore[index]
        assert temporal == {"ok": False, "detail": "the Temporal service does not answer (connection refused)"}
        assert body["checks"]["store"]["ok"] is True  # type: ignore[index]
    # errand doctor, pointed at the server, names the dependency that is down.
    doctor = forkserver.run(["doctor", "--json", "--server", served.url], timeout=120, env=_env(served.database))
    assert doctor.returncode == 1
    server = next(finding for finding in json.loads(doctor.stdout)["findings"] if finding["name"] == "server")
    assert server["status"] == "fail"
    assert "is not ready (" in server["detail"] and "temporal: " in server["detail"]


@pytest.mark.faults
@pytest.mark.slow
def test_ready_again_when_temporal_comes_back(serve: Callable[..., Served]) -> None:
    """The readiness probe keeps one client to the Temporal service: the service killed and
    started again on its own state, the same probe says not ready, then ready again."""
    components.require("temporal")
    server = TemporalServer()
    server.start()
    try:
        served = serve("--engine", "temporal", "--temporal", server.address)
        with served.client() as client:
            wait_ready(client, ready=True, seconds=120)
            server.kill()
            body = wait_ready(client, ready=False, seconds=120)
            temporal = body["checks"]["temporal"]  # type: ignore[index]
            assert temporal["ok"] is False and temporal["detail"].startswith("the Temporal service does not answer (")
            server.start()  # the same state file and port
            body = wait_ready(client, ready=True, seconds=120)
            assert body["checks"]["temporal"] == {"ok": True, "detail": "answers"}  # type: ignore[index]
    finally:
        server.remove()


@pytest.mark.faults
def test_not_ready_while_the_database_is_down(serve: Callable[..., Served], postgres_cluster: Cluster,
                                              postgres_url: str) -> None:
    served = serve(env={"ERRAND_DATABASE_URL": postgres_url})
    with served.client() as client:
        wait_ready(client, ready=True)
        _pg_ctl(postgres_cluster, "stop", "-m", "fast")
        try:
            body = wait_ready(client, ready=False)
            store = body["checks"]["store"]  # type: ignore[index]
            assert store == {"ok": False, "detail": "the database does not answer; the server's log says why"}
            assert client.get("/healthz").status_code == 200
        finally:
            _pg_ctl(postgres_cluster, "start", "-o", f"-c listen_addresses='' -k {postgres_cluster.directory} "
                                                     "-c fsync=off -c max_connections=200")
        wait_ready(client, ready=True)
        assert ("errand_tasks", (("state", "queued"),)) in scrape(client)


def _pg_ctl(cluster: Cluster, action: str, *options: str) -> None:
    data = cluster.directory / "data"
    subprocess.run(_as_owner([str(BIN / "pg_ctl"), "-D", str(data), "-l", str(cluster.directory / "log"), "-w",
                              action, *options]), check=True, capture_output=True)


def _env(database: str) -> dict[str, str]:
    import os

    return {**os.environ, "ERRAND_DATABASE_URL": database}


def _wait_for_line(process: subprocess.Popen[bytes], word: str) -> None:
    assert process.stdout is not None
    line = process.stdout.readline().decode(errors="replace")
    assert word in line, line
