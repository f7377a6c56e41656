"""Retry and follow-up through the HTTP API and the CLI's remote mode, as `errand` does them locally."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import forkserver

from .conftest import Served


def test_a_cancelled_task_is_retried_over_http_and_a_second_retry_says_why_not(
        serve: Callable[..., Served], repo: Path) -> None:
    served = serve("--no-engine")
    with served.client() as client:
        task = client.post("/api/tasks", json={"instruction": "Make test_calc.py pass", "repo": str(repo),
                                               "model": "openai:wire-model"}).json()
        assert client.post(f"/api/tasks/{task['id']}/cancel", json={}).json()["state"] == "cancelled"
        retried = client.post(f"/api/tasks/{task['id']}/retry", json={})
        assert retried.status_code == 200 and retried.json()["state"] == "queued"
        again = client.post(f"/api/tasks/{task['id']}/retry", json={})
        assert again.status_code == 409 and again.json()["code"] == "wrong_state"
        assert "is queued and has no result yet" in again.json()["detail"]
        events = client.get(f"/api/tasks/{task['id']}/events").json()
        assert [e["kind"] for e in events] == ["cancelled", "retried"]
        assert events[1]["data"] == {"after": "cancelled", "round": 1}
        assert "/api/tasks/{task_id}/retry" in client.get("/openapi.json").json()["paths"]

        client.post(f"/api/tasks/{task['id']}/cancel", json={})
        env = {**os.environ, "ERRAND_SERVER": served.url}
        remote = forkserver.run(["retry", task["id"]], timeout=120, env=env)
        assert remote.returncode == 0, remote.stderr
        assert f"{task['id']} queued again (a retry)" in remote.stdout
        assert client.get(f"/api/tasks/{task['id']}").json()["state"] == "queued"
