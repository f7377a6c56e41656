"""A task's model endpoint is resolved where it is submitted and used as recorded by the worker
(real SQLite, real sandboxes, the real OpenAI SDK against loopback wire servers)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from errand.errors import ConfigError
from errand.models import ModelEndpoint
from errand.models.endpoint import fingerprint
from errand.tasks.lifecycle import TaskState
from errand.tasks.service import TaskService
from errand.tasks.store.tasks import TaskStore
from models.wire import WireServer

from .harness import FIX_SCRIPT, openai_turn, running_engine, wait_for_event, wait_for_state

S = TaskState
SCRIPT = [{"tool_calls": [{"name": "edit_file", "arguments": {"path": "calc.py", "old": "return a - b",
                                                              "new": "return a + b"}}]},
          {"tool_calls": [{"name": "finish", "arguments": {"summary": "add() adds", "assumptions": []}}]}]
_PROVIDER_VARIABLES = ("OPENAI_BASE_URL", "OPENAI_API_KEY", "ERRAND_OPENAI_BASE_URL", "ERRAND_OPENAI_API_KEY",
                       "ERRAND_MODEL")


@pytest.fixture
def wire() -> Iterator[WireServer]:
    server = WireServer().start()
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _PROVIDER_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def settings(home: Path, text: str) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(text)


def test_submission_resolves_a_named_model_where_it_is_submitted(
        service: TaskService, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("ERRAND_HOME", str(home))  # a settings file of this test's own
    settings(home, 'model = "bee"\n[models.bee]\nprovider = "openai"\nmodel = "wire-model"\n'
                   'base_url = "http://127.0.0.1:9/v1"\napi_key_env = "BEE_KEY"\n')
    with pytest.raises(ConfigError) as missing:
        service.submit("fix it", repo=repo)  # the file's default, whose key this process lacks
    assert missing.value.code == "model_unavailable" and "$BEE_KEY" in missing.value.message
    assert service.store.list_tasks() == []

    monkeypatch.setenv("BEE_KEY", "sk-bee")
    by_default = service.submit("fix it", repo=repo)
    assert by_default.model == "bee" and by_default.model_endpoint is not None
    assert (by_default.model_endpoint.base_url, by_default.model_endpoint.api_key_env) == (
        "http://127.0.0.1:9/v1", "BEE_KEY")
    monkeypatch.setenv("ERRAND_MODEL", "openai:gpt-4.1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:8/v1")
    ad_hoc = service.submit("fix it", repo=repo).model_endpoint  # ERRAND_MODEL wins over the file
    assert ad_hoc is not None and (ad_hoc.spec, ad_hoc.base_url) == ("openai:gpt-4.1", "http://127.0.0.1:8/v1")
    assert service.submit("fix it", repo=repo, model="bee").model == "bee"  # and --model over both


async def test_a_worker_without_the_key_variable_fails_the_task_before_any_run(
        store: TaskStore, repo: Path, wire: WireServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-worker")  # another variable's key is no fallback
    endpoint = ModelEndpoint("openai", "wire-model", base_url=f"{wire.url}/v1", api_key_env="BEE_KEY",
                             key_fingerprint=fingerprint("sk-bee"), name="bee")
    task = store.create_task(title="t", instruction="Make test_calc.py pass", repo=str(repo), model="bee",
                             model_endpoint=endpoint)
    async with running_engine(store, default_model="scripted:unused"):
        failed = await wait_for_state(store, task.id, S.FAILED, S.READY_FOR_REVIEW)
    assert failed.state is S.FAILED
    [event] = store.events(task.id, kinds=["failed"])
    assert event.data["code"] == "model_key_missing" and "$BEE_KEY" in event.data["reason"]
    assert store.runs(task.id) == [] and wire.requests == []  # nothing was started, nothing sent


async def test_a_task_from_before_endpoints_is_resolved_by_the_worker_and_says_so(
        store: TaskStore, repo: Path, tmp_path: Path) -> None:
    script = tmp_path / "fix.json"
    script.write_text(json.dumps(SCRIPT))
    task = store.create_task(title="t", instruction="Make test_calc.py pass", repo=str(repo),
                             model=f"scripted:{script}")  # as a row from before 0004 reads
    async with running_engine(store):
        done = await wait_for_state(store, task.id, S.READY_FOR_REVIEW, S.FAILED)
    assert done.state is S.READY_FOR_REVIEW
    [said] = store.events(task.id, kinds=["model_endpoint"])
    assert said.data["resolved_by"] == "worker" and said.data["model"]["model"] == str(script)


async def test_a_worker_whose_key_differs_uses_it_and_says_so(
        store: TaskStore, repo: Path, wire: WireServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BEE_KEY", "sk-worker")
    endpoint = ModelEndpoint("openai", "wire-model", base_url=f"{wire.url}/v1", api_key_env="BEE_KEY",
                             key_fingerprint=fingerprint("sk-submitter"))
    for n, turn in enumerate(FIX_SCRIPT):
        wire.answer(openai_turn(turn, n))
    task = store.create_task(title="t", instruction="Make test_calc.py pass", repo=str(repo),
                             model=endpoint.spec, model_endpoint=endpoint)
    async with running_engine(store):
        said = await wait_for_event(store, task.id, lambda e: e.kind == "model_endpoint")
        await wait_for_state(store, task.id, S.READY_FOR_REVIEW, S.FAILED)
    assert said.data["key"] == "differs" and said.data["resolved_by"] == "submission"
    assert "key_fingerprint" not in said.data["model"]
    assert wire.requests and all(r.headers["authorization"] == "Bearer sk-worker" for r in wire.requests)
