"""What a worker records about itself, and what a submission learns from it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from errand.errors import ConfigError
from errand.models import ModelEndpoint
from errand.tasks.engines.workers import EngineBusy, WorkerInfo, check_serves, hold, notes, running_worker

ENVIRONMENT = {"OPENAI_BASE_URL": "http://a.invalid/v1", "OPENAI_API_KEY": "sk-worker", "PATH": "/bin"}


@pytest.fixture(autouse=True)
def own_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ERRAND_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def info() -> WorkerInfo:
    return WorkerInfo.of_this_process("host:1", 3, ENVIRONMENT)


def test_a_worker_records_its_environment_without_its_keys(own_home: Path) -> None:
    with hold(info()):
        recorded = (own_home / "worker.json").read_text()
        assert (own_home / "worker.json").stat().st_mode & 0o077 == 0
        assert "sk-worker" not in recorded
        running = running_worker()
        assert running is not None and running.concurrency == 3
        assert running.base_urls == {"OPENAI_BASE_URL": "http://a.invalid/v1"}
        assert set(running.keys) == {"OPENAI_API_KEY"} and running.variables == tuple(sorted(ENVIRONMENT))
        assert json.loads(recorded)["pid"] == int((own_home / "worker.lock").read_text())
        with pytest.raises(EngineBusy), hold(info()):
            pass
    assert running_worker() is None and not (own_home / "worker.json").exists()


def test_a_submission_is_refused_when_the_worker_lacks_its_key_variable() -> None:
    bee = ModelEndpoint("openai", "m", base_url="http://b.invalid/v1", api_key_env="BEE_KEY", name="bee")
    with pytest.raises(ConfigError) as refused:
        check_serves(bee, info())
    assert refused.value.code == "worker_lacks_key" and "$BEE_KEY" in refused.value.message
    assert "errand worker stop" in refused.value.message
    check_serves(ModelEndpoint("openai", "m", base_url="http://b.invalid/v1", api_key_env="OPENAI_API_KEY"), info())
    check_serves(bee, None)  # no worker runs: the one `errand run` starts has the submitter's environment


def test_a_submission_is_told_where_the_worker_differs() -> None:
    ad_hoc = ModelEndpoint("openai", "m", base_url="http://b.invalid/v1", api_key_env="OPENAI_API_KEY")
    said = notes(ad_hoc, info(), {"OPENAI_BASE_URL": "http://b.invalid/v1", "OPENAI_API_KEY": "sk-mine"})
    assert len(said) == 2
    assert "another $OPENAI_API_KEY" in said[0]
    assert "OPENAI_BASE_URL=http://a.invalid/v1" in said[1] and "uses http://b.invalid/v1" in said[1]
    assert notes(ad_hoc, info(), ENVIRONMENT) == []
