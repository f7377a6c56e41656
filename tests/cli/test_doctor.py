"""``errand doctor`` as an operator runs it: on this machine, with a piece missing, and against a
team's database and Temporal service that answer, are empty, or are down."""

from __future__ import annotations

import json
import os
import shutil
import socket
from pathlib import Path
from typing import Any

import forkserver
from errand.tasks.store.tasks import TaskStore
from postgres import Cluster
from temporal import TemporalServer


def doctor(*args: str, env: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    environment = {key: value for key, value in os.environ.items()
                   if key not in ("ERRAND_DATABASE_URL", "ERRAND_TEMPORAL", "ERRAND_SERVER")}
    done = forkserver.run(["doctor", "--json", *args], timeout=120, env={**environment, **(env or {})})
    return done.returncode, json.loads(done.stdout)


def by_name(report: dict[str, Any]) -> dict[str, dict[str, str]]:
    return {finding["name"]: finding for finding in report["findings"]}


def test_this_machine_can_run_errand() -> None:
    code, report = doctor()
    findings = by_name(report)
    assert code == 0 and report["ok"] is True, report
    for name in ("bubblewrap", "user namespaces", "overlayfs", "cgroups", "git", "disk"):
        assert findings[name]["status"] == "ok", findings[name]
    assert "a sandbox with every namespace starts" in findings["bubblewrap"]["detail"]


def test_a_missing_bubblewrap_fails_and_says_what_to_install(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("git", "runsc"):
        found = shutil.which(tool)
        if found:
            (bin_dir / tool).symlink_to(found)
    code, report = doctor(env={"PATH": str(bin_dir)})
    bubblewrap = by_name(report)["bubblewrap"]
    assert code == 1 and report["ok"] is False
    assert bubblewrap["status"] == "fail"
    assert "bubblewrap" in bubblewrap["fix"]


def test_a_taken_port_is_named() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, report = doctor("--port", str(port))
    finding = by_name(report)["port"]
    assert finding["status"] == "warn"
    assert f"127.0.0.1:{port} is taken" in finding["detail"]
    assert code == 0  # errand still works: serve can take another port


def test_a_team_database_empty_then_migrated_then_down(postgres_cluster: Cluster, postgres_url: str) -> None:
    code, report = doctor("--database-url", postgres_url)
    assert by_name(report)["database"]["status"] == "warn"
    assert "empty" in by_name(report)["database"]["detail"]

    TaskStore.open(postgres_url).close()
    code, report = doctor("--database-url", postgres_url)
    assert code == 0
    assert by_name(report)["database"]["status"] == "ok"
    assert "migrated to" in by_name(report)["database"]["detail"]

    elsewhere = postgres_url.replace(str(postgres_cluster.directory), "/nonexistent-socket-dir")
    code, report = doctor("--database-url", elsewhere)
    database = by_name(report)["database"]
    assert code == 1
    assert database["status"] == "fail" and "does not answer" in database["detail"]
    assert "role and database" in database["fix"]


def test_a_temporal_service_that_answers_and_one_that_does_not(temporal_server: TemporalServer) -> None:
    code, report = doctor("--temporal", temporal_server.address)
    assert code == 0
    assert by_name(report)["temporal"]["status"] == "ok"

    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        nobody = f"127.0.0.1:{free.getsockname()[1]}"
    code, report = doctor("--temporal", nobody)
    assert code == 1
    assert by_name(report)["temporal"]["status"] == "fail"
    assert nobody in by_name(report)["temporal"]["detail"]
