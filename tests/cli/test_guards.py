"""Guards on risky and final steps, as a person meets them: accepting a diff whose tests fail
after it, at low confidence, that deletes a file; cancelling a task; ending a sandbox; and the
task whose sandbox a person ended saying so. Real ``errand`` processes (a pseudo-terminal
where the command asks), the HTTP API of a real ``errand serve`` over loopback."""

from __future__ import annotations

import json
import os
import select
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import forkserver
from engine.cli import errand, errand_json, script, stop_worker
from engine.harness import TEST, git, make_repo, worktree_state
from server.conftest import start_server

pytestmark = pytest.mark.faults

BREAK = ("edit_file", {"path": "calc.py", "old": "return a - b", "new": "return a * b"})
DELETE = ("shell", {"command": "rm NOTES.md"})
GIVE_UP = ("finish", {"summary": "tried", "assumptions": []})
SLEEP = ("shell", {"command": "sleep 600"})


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    home = tmp_path / "home"
    yield home
    stop_worker(home)


def risky_task(home: Path, tmp_path: Path) -> tuple[Path, dict[str, object]]:
    """A task ready for review whose diff breaks the tests and deletes NOTES.md."""
    repo = make_repo(tmp_path / "project", files={"NOTES.md": "keep me\n"})
    model = script(tmp_path / "risky.json", [[BREAK], [DELETE], [TEST], [GIVE_UP]])
    ran = errand(home, "run", "Make test_calc.py pass", "--repo", str(repo), "--model", model, "-f")
    assert ran.returncode == 0, ran.stderr
    task = errand_json(home, "show", json.loads(errand(home, "ls", "--json").stdout)[0]["id"])
    assert task["state"] == "ready_for_review", task
    return repo, task


def branch_exists(repo: Path, branch: str) -> bool:
    return bool(git(repo, "branch", "--list", branch).strip())


def on_terminal(home: Path, *args: str, answer: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    """Run ``errand ARGS`` on a pseudo-terminal; once it asks (a line ending ``[y/N]:``), type ``answer``."""
    import pty

    environment = {**os.environ, "ERRAND_HOME": str(home), "COLUMNS": "120", **(env or {})}
    environment.pop("ERRAND_DATABASE_URL", None)
    master, slave = pty.openpty()
    process = forkserver.start([*args], stdin=slave, stdout=slave, stderr=slave, env=environment)
    os.close(slave)
    seen, answered = b"", False
    try:
        while True:
            ready, _, _ = select.select([master], [], [], 180)
            assert ready, f"errand {args} wrote nothing for 180 s: {seen.decode(errors='replace')}"
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the command has ended
                break
            if not data:
                break
            seen += data
            if not answered and b"[y/N]:" in seen:
                os.write(master, answer.encode() + b"\r")
                answered = True
    finally:
        os.close(master)
        code = process.wait(timeout=60)
    return code, seen.decode(errors="replace").replace("\r\n", "\n")


REASONS = ("tests fail after the change", "confidence in it is low", "deletes 1 file(s): NOTES.md")


def test_accepting_a_risky_diff_asks_first_on_every_face(home: Path, tmp_path: Path) -> None:
    repo, task = risky_task(home, tmp_path)
    task_id, branch = str(task["id"]), str(task["branch"])
    before = worktree_state(repo)

    piped = errand(home, "accept", task_id)  # no terminal: nobody to ask
    assert piped.returncode == 1, piped.stdout
    assert all(reason in piped.stderr for reason in REASONS), piped.stderr
    assert "pass --yes" in piped.stderr and "nothing changed" in piped.stderr
    assert not branch_exists(repo, branch)

    code, screen = on_terminal(home, "accept", task_id, answer="n")
    assert code == 1 and "Accept " + task_id + "? [y/N]:" in screen and "nothing changed" in screen, screen
    assert all(reason in screen for reason in REASONS), screen
    assert not branch_exists(repo, branch)
    assert errand_json(home, "show", task_id)["state"] == "ready_for_review"

    stop_worker(home)  # the server's engine takes the home over
    database = f"sqlite:///{home / 'errand.db'}"
    served = start_server(tmp_path, "--no-engine", env={"ERRAND_HOME": str(home), "ERRAND_DATABASE_URL": database})
    try:
        refused = httpx.post(f"{served.url}/api/tasks/{task_id}/accept", json={}, timeout=60)
        assert refused.status_code == 409 and refused.headers["content-type"] == "application/problem+json"
        problem = refused.json()
        assert problem["code"] == "needs_confirmation" and problem["task_id"] == task_id
        assert [any(r in reason for reason in problem["reasons"]) for r in REASONS] == [True] * 3, problem
        remote = errand(home, "accept", task_id, "--server", served.url)
        assert remote.returncode == 1 and "pass --yes" in remote.stderr and REASONS[2] in remote.stderr
        assert not branch_exists(repo, branch)

        confirmed = httpx.post(f"{served.url}/api/tasks/{task_id}/accept", json={"confirm": True}, timeout=60)
        assert confirmed.status_code == 200, confirmed.text
        assert confirmed.json()["branch"] == branch
    finally:
        served.stop()
    assert "return a * b" in git(repo, "show", f"{branch}:calc.py")
    assert "NOTES.md" not in git(repo, "ls-tree", "--name-only", branch)
    assert worktree_state(repo) == before


def test_yes_accepts_and_a_terminal_yes_accepts(home: Path, tmp_path: Path) -> None:
    repo, task = risky_task(home, tmp_path)
    code, screen = on_terminal(home, "accept", str(task["id"]), answer="y")
    assert code == 0 and "accepted" in screen and str(task["branch"]) in screen, screen
    assert branch_exists(repo, str(task["branch"]))
    again = errand(home, "accept", str(task["id"]), "--yes")
    assert again.returncode == 1 and "accepted" in again.stderr, again.stderr  # --yes passes no state check


def test_cancel_and_sandbox_rm_ask_first(home: Path, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "project")
    queued = errand(home, "run", "fix it", "--repo", str(repo), "--model", "scripted:/dev/null", "--no-worker")
    assert queued.returncode == 0, queued.stderr
    task_id = json.loads(errand(home, "ls", "--json").stdout)[0]["id"]
    refused = errand(home, "cancel", task_id)
    assert refused.returncode == 1 and "cancel " + task_id in refused.stderr and "pass --yes" in refused.stderr
    assert errand_json(home, "show", task_id)["state"] == "queued"
    code, screen = on_terminal(home, "cancel", task_id, answer="n")
    assert code == 1 and "Cancel " + task_id + "? [y/N]:" in screen, screen
    assert errand_json(home, "show", task_id)["state"] == "queued"
    assert errand(home, "cancel", task_id, "--yes").returncode == 0
    assert errand_json(home, "show", task_id)["state"] == "cancelled"

    created = errand(home, "sandbox", "create", "--timeout", "300")
    assert created.returncode == 0, created.stderr
    sandbox_id = created.stdout.split()[0]
    try:
        kept = errand(home, "sandbox", "rm", sandbox_id)
        assert kept.returncode == 1 and f"end {sandbox_id}" in kept.stderr and "pass --yes" in kept.stderr
        assert sandbox_id in [s["id"] for s in json.loads(errand(home, "sandbox", "ls", "--json").stdout)]
    finally:
        removed = errand(home, "sandbox", "rm", sandbox_id, "--yes")
    assert removed.returncode == 0 and f"removed {sandbox_id}" in removed.stdout, removed.stderr
    assert json.loads(errand(home, "sandbox", "ls", "--json").stdout) == []


@pytest.mark.slow
def test_a_task_whose_sandbox_a_person_ended_says_so(home: Path, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "project")
    model = script(tmp_path / "sleepy.json", [[SLEEP], [GIVE_UP]])
    assert errand(home, "run", "wait a while", "--repo", str(repo), "--model", model).returncode == 0
    task_id = json.loads(errand(home, "ls", "--json").stdout)[0]["id"]
    deadline = time.monotonic() + 300
    while True:  # the agent's `sleep 600` runs in the task's sandbox
        log = errand(home, "logs", task_id).stdout
        sandboxes = [s for s in json.loads(errand(home, "sandbox", "ls", "--json").stdout)
                     if s["labels"].get("task") == task_id and s["labels"].get("role") == "agent"]
        if "sleep 600" in log and sandboxes:
            break
        assert time.monotonic() < deadline, log
        time.sleep(0.5)
    code, screen = on_terminal(home, "sandbox", "rm", *(s["id"] for s in sandboxes), answer="y")
    assert code == 0 and "removed" in screen, screen
    while errand_json(home, "show", task_id)["state"] != "failed":
        assert time.monotonic() < deadline, errand(home, "show", task_id).stdout
        time.sleep(0.5)
    shown = errand(home, "show", task_id).stdout
    assert "the sandbox was terminated by a person (`errand sandbox rm`" in shown, shown
    assert "the sandbox is gone" not in shown


UNITTEST_TOML = '[test]\ncommand = "python3 -m unittest"\n'  # prints only its failures, and counts
UNITTESTS = {"test_calc.py": "import unittest\n\nfrom calc import add\n\n\nclass TestAdd(unittest.TestCase):\n"
                             "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n",
             "test_double.py": "import unittest\n\nfrom calc import double\n\n\nclass TestDouble(unittest.TestCase):\n"
                               "    def test_double(self):\n        self.assertEqual(double(2), 5)\n"}
EMPTY_THE_FAILING_TEST = ("shell", {"command": ": > test_calc.py"})
DOCUMENT = ("edit_file", {"path": "calc.py", "old": "def double(x):\n",
                          "new": "def double(x):\n    \"\"\"Twice x, and one.\"\"\"\n"})


def test_a_failing_test_emptied_away_is_gone_not_fixed_and_accept_asks(home: Path, tmp_path: Path) -> None:
    """The failing test's file is truncated to 0 bytes and the suite passes: the evidence says the
    test is gone (was failing), not fixed, the confidence is low, and accepting asks first,
    naming the emptied file as it would a deleted one."""
    repo = make_repo(tmp_path / "project", toml=UNITTEST_TOML, files=UNITTESTS)
    model = script(tmp_path / "empty.json", [[EMPTY_THE_FAILING_TEST, DOCUMENT], [TEST], [GIVE_UP]])
    ran = errand(home, "run", "Make the tests pass", "--repo", str(repo), "--model", model, "-f")
    assert ran.returncode == 0, ran.stderr
    task = errand_json(home, "show", json.loads(errand(home, "ls", "--json").stdout)[0]["id"])
    assert task["state"] == "ready_for_review", task
    evidence = task["runs"][0]["result"]["evidence"]
    assert evidence["tests_before"]["failing"] == ["test_calc.TestAdd.test_add"], evidence["tests_before"]
    assert evidence["tests_after"]["exit_code"] == 0, evidence["tests_after"]
    assert evidence["fixed_tests"] == [] and evidence["gone_tests"] == ["test_calc.TestAdd.test_add"], evidence
    assert evidence["confidence"]["level"] == "low", evidence["confidence"]
    shown = errand(home, "show", str(task["id"]))
    assert "gone (was failing), not fixed: test_calc.TestAdd.test_add" in " ".join(shown.stdout.split()), shown.stdout

    refused = errand(home, "accept", str(task["id"]))
    said = " ".join(refused.stderr.split())
    assert refused.returncode == 1, refused.stdout
    assert "gone (was failing)" in said and "empties 1 file(s)" in said and "test_calc.py" in said, said
    assert not branch_exists(repo, str(task["branch"]))
