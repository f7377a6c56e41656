"""The API resolves a task's model on the server, from the server's settings file and environment,
and shows the endpoint the task records (never a key); a named scripted model is the server's own."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from models.wire import WireServer

from .conftest import Served


def test_the_api_records_and_shows_the_endpoint_a_model_resolved_to(
        serve: Callable[..., Served], wire: WireServer, repo: Path, tmp_path: Path) -> None:
    home = tmp_path / "server-home"
    home.mkdir()
    (tmp_path / "demo.json").write_text("[]")
    (home / "config.toml").write_text(
        '[models.bee]\nprovider = "openai"\nmodel = "wire-model"\nbase_url = "http://127.0.0.1:9/v1"\n'
        'api_key_env = "BEE_KEY"\n[models.demo]\nprovider = "scripted"\nmodel = "../demo.json"\n')
    served = serve("--no-engine", env={"ERRAND_HOME": str(home), "BEE_KEY": "sk-bee-secret"})
    with served.client() as client:
        named = client.post("/api/tasks", json={"instruction": "x", "repo": str(repo), "model": "bee"})
        assert named.status_code == 201, named.text
        shown = client.get(f"/api/tasks/{named.json()['id']}").json()
        endpoint = shown["model_endpoint"]
        assert (shown["model"], endpoint["name"], endpoint["base_url"], endpoint["api_key_env"]) == (
            "bee", "bee", "http://127.0.0.1:9/v1", "BEE_KEY")
        assert "sk-bee-secret" not in str(shown)
        page = client.get(f"/tasks/{shown['id']}").text
        assert "<dt>Model</dt><dd>bee = openai:wire-model at http://127.0.0.1:9/v1, key $BEE_KEY</dd>" in page

        ad_hoc = client.post("/api/tasks", json={"instruction": "x", "repo": str(repo),
                                                 "model": "openai:wire-model"}).json()["model_endpoint"]
        assert (ad_hoc["base_url"], ad_hoc["api_key_env"]) == (f"{wire.url}/v1", "OPENAI_API_KEY")  # the server's

        scripted = client.post("/api/tasks", json={"instruction": "x", "repo": str(repo), "model": "demo"})
        assert scripted.status_code == 201, scripted.text  # named by the server's own settings
        assert scripted.json()["model_endpoint"]["model"] == str(tmp_path / "demo.json")
        refused = client.post("/api/tasks", json={"instruction": "x", "repo": str(repo),
                                                  "model": f"scripted:{tmp_path / 'demo.json'}"})
        assert refused.status_code == 422 and refused.json()["code"] == "model_not_allowed"
