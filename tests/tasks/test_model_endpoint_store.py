"""A task keeps the model endpoint it was submitted with; rows from before 0004 stay readable."""

from __future__ import annotations

from pathlib import Path

from errand.models import ModelEndpoint
from errand.tasks.store.tasks import TaskStore

from .conftest import store_at_revision


def test_a_task_keeps_its_endpoint(store: TaskStore) -> None:
    endpoint = ModelEndpoint("openai", "qwen:7b", base_url="http://127.0.0.1:8000/v1", api_key_env="LOCAL_KEY",
                             key_fingerprint="0011aabb:0123456789ab", name="local")
    task = store.create_task(title="t", instruction="i", repo="/r", model="local", model_endpoint=endpoint)
    assert task.model_endpoint == endpoint
    assert store.get_task(task.id).model_endpoint == endpoint
    assert store.list_tasks()[0].model_endpoint == endpoint


def test_a_version_3_row_with_a_plain_model_spec_upgrades_and_reads(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'errand.db'}"
    store_at_revision(url, "0003",
                      "INSERT INTO tasks (id, title, instruction, repo, base_ref, model, attempts, state, created_at, "
                      "updated_at) VALUES ('t-1', 't', 'i', '/r', 'HEAD', 'openai:gpt-4.1', 1, 'queued', 1, 1)")
    with TaskStore.open(url) as store:
        task = store.get_task("t-1")
        assert (task.model, task.model_endpoint) == ("openai:gpt-4.1", None)
