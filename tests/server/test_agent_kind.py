"""The API takes a task's agent (else the server's config.toml's), and the task's page says which it is."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from .conftest import Served


def test_the_api_takes_the_agent_and_the_page_shows_it(serve: Callable[..., Served], repo: Path,
                                                        tmp_path: Path) -> None:
    home = tmp_path / "server-home"
    home.mkdir()
    (tmp_path / "demo.json").write_text("[]")
    (home / "config.toml").write_text('agent = "claude-code"\n[models.demo]\nprovider = "scripted"\n'
                                      'model = "../demo.json"\n')
    served = serve("--no-engine", env={"ERRAND_HOME": str(home)})
    with served.client() as client:
        by_default = client.post("/api/tasks", json={"instruction": "x", "repo": str(repo), "model": "demo"})
        assert by_default.status_code == 201, by_default.text
        assert by_default.json()["agent"] == "claude-code"
        page = client.get(f"/tasks/{by_default.json()['id']}").text
        assert "<dt>Agent</dt><dd>claude-code</dd>" in page
        named = client.post("/api/tasks", json={"instruction": "x", "repo": str(repo), "model": "demo",
                                                "agent": "errand"})
        assert named.json()["agent"] == "errand"
        assert "<dt>Agent</dt><dd>errand</dd>" in client.get(f"/tasks/{named.json()['id']}").text
        unknown = client.post("/api/tasks", json={"instruction": "x", "repo": str(repo), "model": "demo",
                                                  "agent": "cursor"})
        assert unknown.status_code == 422 and unknown.json()["code"] == "unknown_agent", unknown.text
        assert len(client.get("/api/tasks").json()["tasks"]) == 2
