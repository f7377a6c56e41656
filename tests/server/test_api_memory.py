"""The memory API over real HTTP against a real ``errand serve``: list, show, add, edit, approve,
reject, remove, a task's memories, and errors as problem+json, under the task API's auth rules."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from errand.memory import MemoryStore, Provenance, project_key
from errand.tasks.store.tasks import TaskStore

from .conftest import Served


@pytest.fixture
def served(serve: Callable[..., Served]) -> Served:
    return serve("--no-engine")


@pytest.fixture
def client(served: Served) -> Iterator[httpx.Client]:
    with served.client() as client:
        yield client


def problem(response: httpx.Response, status: int, code: str) -> dict[str, object]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body: dict[str, object] = response.json()
    assert body["code"] == code, body
    return body


def test_a_person_adds_edits_and_removes_a_memory(client: httpx.Client, repo: Path) -> None:
    added = client.post("/api/memories", json={"repo": str(repo), "text": "Run the tests with python3 test_calc.py",
                                               "kind": "command"})
    assert added.status_code == 201, added.text
    memory = added.json()
    assert added.headers["location"] == f"/api/memories/{memory['id']}"
    assert memory["project"] == project_key(repo)
    assert (memory["status"], memory["kind"], memory["provenance"]["source"]) == ("active", "command", "person")

    again = client.post("/api/memories", json={"repo": str(repo), "text": "Run the tests with python3 test_calc.py"})
    assert again.status_code == 200 and again.json()["id"] == memory["id"] and again.json()["evidence"] == 2

    edited = client.patch(f"/api/memories/{memory['id']}", json={"text": "Run tests: python3 test_calc.py -v"})
    assert edited.status_code == 200 and edited.json()["text"] == "Run tests: python3 test_calc.py -v"
    assert edited.json()["kind"] == "command"

    listed = client.get("/api/memories", params={"project": project_key(repo), "kind": "command"}).json()
    assert [m["id"] for m in listed["memories"]] == [memory["id"]] and listed["next"] is None
    assert client.get("/api/memories/projects").json() == [project_key(repo)]

    assert client.delete(f"/api/memories/{memory['id']}").json()["id"] == memory["id"]
    problem(client.get(f"/api/memories/{memory['id']}"), 404, "memory_not_found")


def test_proposals_are_approved_or_rejected_once(client: httpx.Client, repo: Path) -> None:
    first, second = (client.post("/api/memories", json={"repo": str(repo), "text": text, "proposed": True}).json()
                     for text in ("Reviewers want type hints on public functions", "Never touch the vendor folder"))
    assert first["status"] == second["status"] == "proposed"
    proposed = client.get("/api/memories", params={"status": "proposed"}).json()["memories"]
    assert {m["id"] for m in proposed} == {first["id"], second["id"]}

    assert client.post(f"/api/memories/{first['id']}/approve", json={}).json()["status"] == "active"
    rejected = client.post(f"/api/memories/{second['id']}/reject", json={}).json()
    assert (rejected["status"], rejected["archived_reason"]) == ("archived", "rejected")
    body = problem(client.post(f"/api/memories/{second['id']}/approve", json={}), 422, "illegal_status")
    assert body["memory_id"] == second["id"]


def test_show_names_what_a_memory_supersedes(client: httpx.Client, repo: Path) -> None:
    old = client.post("/api/memories", json={"repo": str(repo), "text": "Lint with flake8"}).json()
    new = client.post("/api/memories", json={"repo": str(repo), "text": "Lint with ruff check .",
                                             "supersedes": old["id"]}).json()
    shown = client.get(f"/api/memories/{new['id']}").json()
    assert shown["supersedes"] == old["id"] and shown["supersedes_memory"]["text"] == "Lint with flake8"
    replaced = client.get(f"/api/memories/{old['id']}").json()
    assert replaced["status"] == "archived" and replaced["superseded_by_memory"]["id"] == new["id"]


def test_bad_input_is_refused_and_changes_nothing(client: httpx.Client, repo: Path) -> None:
    secret = "the deploy key is AKIAIOSFODNN7EXAMPLE"
    body = problem(client.post("/api/memories", json={"repo": str(repo), "text": secret}), 422, "secret_refused")
    assert "AKIA" not in str(body["detail"])
    problem(client.post("/api/memories", json={"repo": str(repo), "text": "   "}), 422, "empty_memory")
    problem(client.post("/api/memories", json={"repo": str(repo), "text": "x", "kind": "gossip"}), 422,
            "invalid_request")
    problem(client.patch("/api/memories/999", json={"text": "y"}), 404, "memory_not_found")
    assert client.get("/api/memories").json()["memories"] == []


def test_pages_go_newest_first(client: httpx.Client, repo: Path) -> None:
    ids = [client.post("/api/memories", json={"repo": str(repo), "text": f"Fact number {word} about the build",
                                              "proposed": True}).json()["id"]
           for word in ("one", "two", "three")]
    first = client.get("/api/memories", params={"limit": 2}).json()
    assert [m["id"] for m in first["memories"]] == ids[:0:-1] and first["next"] == 2
    rest = client.get("/api/memories", params={"limit": 2, "offset": first["next"]}).json()
    assert [m["id"] for m in rest["memories"]] == ids[:1] and rest["next"] is None


def test_a_task_shows_the_memories_it_was_given_and_recalled(served: Served, client: httpx.Client,
                                                            repo: Path) -> None:
    task = client.post("/api/tasks", json={"instruction": "Fix add()", "repo": str(repo),
                                           "model": "openai:m"}).json()
    assert client.get(f"/api/tasks/{task['id']}/memories").json() == []
    with MemoryStore.open(served.database, embedder=None) as memories:
        project = project_key(repo)
        given = memories.add(project, "Tests run with python3 test_calc.py", kind="command",
                             provenance=Provenance.task("t-earlier", 3, "test command"))
        recalled = memories.add(project, "calc.py must stay free of imports", kind="convention",
                                provenance=Provenance.review("t-earlier", "rejected"))
        memories.record_use(task["id"], [given.id, recalled.id], "given")
        memories.record_use(task["id"], [recalled.id], "recalled")
    tasks = TaskStore.open(served.database)
    tasks.append_event(task["id"], None, "memories_given", {"ids": [given.id, recalled.id], "lines": [],
                                                            "stale": [recalled.id]})
    tasks.close()

    used = client.get(f"/api/tasks/{task['id']}/memories").json()
    assert [(u["memory"]["id"], u["how"], u["stale"]) for u in used] == [
        (given.id, ["given"], False), (recalled.id, ["given", "recalled"], True)]
    assert used[0]["memory"]["source"] == "task t-earlier event 3 (test command)"
    assert used[1]["memory"]["use_count"] == 1
    problem(client.get("/api/tasks/t-nope/memories"), 404, "task_not_found")


def test_writes_need_the_token_as_the_task_api_does(serve: Callable[..., Served], repo: Path) -> None:
    served = serve("--no-engine", token="s3cret-token-for-tests")
    with served.client() as anonymous, served.client("s3cret-token-for-tests") as person:
        problem(anonymous.get("/api/memories"), 401, "unauthorized")
        problem(anonymous.post("/api/memories", json={"repo": str(repo), "text": "x y z"}), 401, "unauthorized")
        added = person.post("/api/memories", json={"repo": str(repo), "text": "Use tabs in the Makefile"})
        assert added.status_code == 201
        problem(anonymous.delete(f"/api/memories/{added.json()['id']}"), 401, "unauthorized")
        cross = person.post(f"/api/memories/{added.json()['id']}/archive", json={}, headers={"Origin": "http://evil.test"})
        problem(cross, 403, "cross_site")
