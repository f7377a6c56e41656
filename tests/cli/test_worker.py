"""``errand worker`` as a person starts it on a machine where one already runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.cli import errand
from errand.tasks.engines.workers import WorkerInfo, hold


def test_a_second_worker_refuses_before_it_says_anything_else(errand_home: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ERRAND_HOME", str(errand_home))
    monkeypatch.delenv("ERRAND_DATABASE_URL", raising=False)
    errand_home.mkdir()
    with hold(WorkerInfo.of_this_process("w-test", 1, {})) as lock:
        refused = errand(errand_home, "worker")
    lock.write_text("")  # it named this process: the fixture must not stop it as the home's worker
    assert refused.returncode == 1
    assert refused.stderr.startswith("error: another errand worker is running on")
    assert "errand worker" not in refused.stderr.split("error:")[0] and "at a time" not in refused.stderr
