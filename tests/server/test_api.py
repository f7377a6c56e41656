"""The HTTP API end to end: a real server runs a task over the OpenAI wire protocol; the
API, its event stream and the CLI's remote mode drive it from submission to accept."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import httpx

import forkserver
from engine.harness import FINISH, FIX, READ, TEST, git, worktree_state
from models.wire import WireServer

from .conftest import Served, queue_turns, wait_state

ASK = ("ask_user", {"question": "Should add() accept strings?"})


def stream(client: httpx.Client, task_id: str, count: int, last_event_id: int | None = None) -> list[dict[str, str]]:
    """The first ``count`` events of the task's SSE stream, as their fields."""
    headers = {"Accept": "text/event-stream"}
    if last_event_id is not None:
        headers["Last-Event-ID"] = str(last_event_id)
    events: list[dict[str, str]] = []
    fields: dict[str, str] = {}
    with client.stream("GET", f"/api/tasks/{task_id}/events/stream", headers=headers) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if not line:
                if "data" in fields:
                    events.append(fields)
                    if len(events) == count:
                        return events
                fields = {}
            elif not line.startswith(":"):
                name, _, value = line.partition(": ")
                fields[name] = value
    return events


def errand(served: Served, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ERRAND_SERVER": served.url, "COLUMNS": "200"}
    return forkserver.run([*args], timeout=120, env=env)


def test_a_task_from_submission_to_accept(serve: Callable[..., Served], wire: WireServer, repo: Path) -> None:
    before = worktree_state(repo)
    queue_turns(wire, [[READ], [ASK], [FIX], [TEST], [FINISH]])
    served = serve()
    with served.client() as client:
        created = client.post("/api/tasks", json={"instruction": "Make test_calc.py pass", "repo": str(repo),
                                                  "model": "openai:wire-model"})
        assert created.status_code == 201, created.text
        task = created.json()
        assert created.headers["location"] == f"/api/tasks/{task['id']}"
        asked = wait_state(client, task["id"], "needs_input")
        assert asked["question"] == "Should add() accept strings?"

        first = stream(client, task["id"], 3)
        stored = client.get(f"/api/tasks/{task['id']}/events").json()
        assert [int(e["id"]) for e in first] == [e["id"] for e in stored[:3]]
        assert [e["event"] for e in first] == [e["kind"] for e in stored[:3]]
        resumed = stream(client, task["id"], 2, last_event_id=int(first[1]["id"]))
        assert [int(e["id"]) for e in resumed] == [e["id"] for e in stored[2:4]]
        assert json.loads(resumed[0]["data"]) == stored[2]

        wrong = client.post(f"/api/tasks/{task['id']}/accept", json={})
        assert wrong.status_code == 409 and wrong.headers["content-type"] == "application/problem+json"
        assert wrong.json()["code"] == "wrong_state" and wrong.json()["state"] == "needs_input"
        answered = client.post(f"/api/tasks/{task['id']}/answer", json={"text": "No, numbers only."})
        assert answered.status_code == 200 and answered.json()["event_id"] > 0
        wait_state(client, task["id"], "ready_for_review")

        diff = client.get(f"/api/tasks/{task['id']}/diff")
        assert diff.headers["content-type"].startswith("text/x-diff") and "+    return a + b" in diff.text
        evidence = client.get(f"/api/tasks/{task['id']}/evidence").json()
        assert evidence["rank"] == 1 and evidence["evidence"]["confidence"]["level"] in ("high", "medium")
        assert "patch" not in evidence["run"]["result"]
        assert [a["rank"] for a in client.get(f"/api/tasks/{task['id']}/attempts").json()] == [1]

        cli_shown = errand(served, "show", task["id"])
        assert cli_shown.returncode == 0, cli_shown.stderr
        assert "tests after: pass" in cli_shown.stdout
        cli_diff = errand(served, "diff", task["id"])
        assert cli_diff.stdout == diff.text
        cli_logs = errand(served, "logs", "-f", task["id"])
        assert "? Should add() accept strings?" in cli_logs.stdout and "ready_for_review" in cli_logs.stdout
        assert errand(served, "show", "t-nope").stderr.startswith("error: no task has id 't-nope'")

        accepted = errand(served, "accept", task["id"])
        assert accepted.returncode == 0, accepted.stderr
        assert client.get(f"/api/tasks/{task['id']}").json()["state"] == "accepted"
    assert "return a + b" in git(repo, "show", f"{task['branch']}:calc.py")
    assert worktree_state(repo) == before


def test_listing_pages_and_filters(serve: Callable[..., Served], repo: Path) -> None:
    served = serve("--no-engine")
    with served.client() as client:
        ids = []
        for n in range(5):
            made = client.post("/api/tasks", json={"instruction": f"task {n}", "repo": str(repo),
                                                   "model": "openai:wire-model"})
            ids.append(made.json()["id"])
        first = client.get("/api/tasks", params={"limit": 2}).json()
        assert [t["id"] for t in first["tasks"]] == ids[::-1][:2] and first["next"] == ids[3]
        second = client.get("/api/tasks", params={"limit": 2, "before": first["next"]}).json()
        assert [t["id"] for t in second["tasks"]] == ids[::-1][2:4]
        assert client.get("/api/tasks", params={"state": "running"}).json() == {"tasks": [], "next": None}
        assert len(client.get("/api/tasks", params={"repo": str(repo)}).json()["tasks"]) == 5
        bad = client.get("/api/tasks", params={"state": "nope"})
        assert bad.status_code == 422 and bad.json()["code"] == "invalid_request"

        cancelled = client.post(f"/api/tasks/{ids[0]}/cancel", json={})
        assert cancelled.json()["state"] == "cancelled"
        again = client.post(f"/api/tasks/{ids[0]}/cancel", json={})
        assert again.status_code == 409 and again.json()["code"] == "wrong_state"
        assert again.json()["state"] == "cancelled" and "nothing of it runs any more" in again.json()["detail"]
        assert client.get("/api/tasks/t-nope").json()["code"] == "task_not_found"
        refused = client.post("/api/tasks", json={"instruction": "x", "repo": str(repo), "model": "nosuch:model"})
        assert refused.status_code == 422 and "unknown model" in refused.json()["detail"]

        listed = errand(served, "ls", "--json")
        assert [t["id"] for t in json.loads(listed.stdout)] == ids[::-1]
        message = errand(served, "message", ids[1], "hello")
        assert message.returncode == 0, message.stderr
        assert [e["kind"] for e in client.get(f"/api/tasks/{ids[1]}/events").json()] == ["message_sent"]
        assert "openapi" in client.get("/openapi.json").json()
