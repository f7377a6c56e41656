"""Small things a person sees: `errand ls` fits an 80-column terminal, and the prompt cache's
reads and writes are in `errand show` and on the task page, not only in --json."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import forkserver
from engine.cli import errand, errand_json, script, stop_worker
from engine.harness import FIX_SCRIPT, anthropic_turn, make_repo
from errand._figures import tokens
from models.wire import WireServer
from server.conftest import start_server

LONG_TITLE = "Rewrite the configuration loader so that every setting can come from the environment too"


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    home = tmp_path / "home"
    yield home
    stop_worker(home)


def test_ls_fits_80_columns(home: Path, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "a-project-in-a-directory-with-a-rather-long-name")
    for title in (LONG_TITLE, "Short one"):
        assert errand(home, "run", title, "--repo", str(repo), "--model", "scripted:/dev/null",
                      "--no-worker").returncode == 0
    env = {**os.environ, "ERRAND_HOME": str(home), "COLUMNS": "80"}
    env.pop("ERRAND_DATABASE_URL", None)
    listed = forkserver.run(["ls"], env=env, timeout=120)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.rstrip("\n").splitlines()
    assert len(lines) == 3, listed.stdout  # a header and one line a task
    assert all(len(line.rstrip()) <= 80 for line in lines), listed.stdout
    long_row = next(line for line in lines if "Rewrite" in line)
    assert "Rewrite the configuration" in long_row and "…" in long_row and LONG_TITLE not in long_row
    assert "Short one" in listed.stdout
    ids = {task["id"] for task in json.loads(errand(home, "ls", "--json").stdout)}
    assert all(any(line.startswith(task_id) for line in lines) for task_id in ids)  # ids whole


def cached_turn(turn: list[tuple[str, dict[str, object]]], n: int) -> dict[str, object]:
    body = anthropic_turn(turn, n)
    body["usage"] = {"input_tokens": 100, "output_tokens": 20, "cache_read_input_tokens": 3000,
                     "cache_creation_input_tokens": 500}
    return body


def test_show_and_the_page_tell_cache_reads_and_writes(home: Path, tmp_path: Path) -> None:
    wire = WireServer().start()
    try:
        for n, turn in enumerate(FIX_SCRIPT):
            wire.answer(cached_turn(turn, n))
        repo = make_repo(tmp_path / "project")
        env = {**os.environ, "ERRAND_HOME": str(home), "COLUMNS": "200", "ANTHROPIC_BASE_URL": wire.url,
               "ANTHROPIC_API_KEY": "sk-ant-wire"}
        env.pop("ERRAND_DATABASE_URL", None)
        ran = forkserver.run(["run", "Make test_calc.py pass", "--repo", str(repo), "--model", "anthropic:wire-model",
                               "-f"], env=env, timeout=600)
        assert ran.returncode == 0 and "ready for review" in ran.stdout, ran.stdout + ran.stderr
        task_id = json.loads(errand(home, "ls", "--json").stdout)[0]["id"]
        usage = errand_json(home, "show", task_id)["progress"]["usage"]
        assert usage["cached_tokens"] >= 4 * 3000 and usage["cache_write_tokens"] >= 4 * 500, usage
        shown = errand(home, "show", task_id).stdout
        assert (f"of them {tokens(usage['cached_tokens'])} read from the prompt cache, "
                f"{tokens(usage['cache_write_tokens'])} written to it") in shown, shown
        stop_worker(home)
        served = start_server(tmp_path, "--no-engine",
                              env={"ERRAND_HOME": str(home), "ERRAND_DATABASE_URL": f"sqlite:///{home / 'errand.db'}"})
        try:
            page = httpx.get(f"{served.url}/tasks/{task_id}", timeout=60).text
        finally:
            served.stop()
        assert f"{tokens(usage['cached_tokens'])} read from the prompt cache" in page
        assert f"{tokens(usage['cache_write_tokens'])} written to it" in page
    finally:
        wire.stop()


ANSWER = "add() returns a - b: it subtracts, so add(2, 3) is -1."


def test_a_question_answered_without_a_change_ends_answered_with_its_report(home: Path, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "project")
    model = script(tmp_path / "answer.json", [[("read_file", {"path": "calc.py"})],
                                               [("finish", {"summary": "Read calc.py; changed nothing",
                                                            "assumptions": [], "answer": ANSWER})]])
    ran = errand(home, "run", "What does add() in calc.py return?", "--repo", str(repo), "--model", model, "-f")
    assert ran.returncode == 0, ran.stderr
    assert "answered (no change): " + ANSWER in ran.stdout and "is answered" in ran.stdout, ran.stdout
    task_id = json.loads(errand(home, "ls", "--json").stdout)[0]["id"]
    assert errand_json(home, "show", task_id)["state"] == "answered"
    shown = errand(home, "show", task_id).stdout
    assert "answered (it changed no file, so there is nothing to accept):" in shown and ANSWER in shown, shown
    assert "failed" not in shown
    refused = errand(home, "accept", task_id)
    assert refused.returncode == 1 and "answered with a report and changed nothing" in refused.stderr
    stop_worker(home)
    served = start_server(tmp_path, "--no-engine",
                          env={"ERRAND_HOME": str(home), "ERRAND_DATABASE_URL": f"sqlite:///{home / 'errand.db'}"})
    try:
        page = httpx.get(f"{served.url}/tasks/{task_id}", timeout=60).text
        listed = httpx.get(f"{served.url}/api/tasks", params={"state": "answered"}, timeout=60).json()
    finally:
        served.stop()
    assert "<h3>Answered</h3>" in page and ANSWER.replace(">", "&gt;") in page
    assert [t["id"] for t in listed["tasks"]] == [task_id]
