"""Line comments become the next round, through the faces a person uses: the HTTP API of a real
``errand serve`` and ``errand followup --comment`` against it. The agent runs on the real
``openai`` SDK against a loopback server that records every request, so what is asserted is
what the next round's model was sent: each comment anchored with its file, its lines, those
lines quoted, and its text. Bad comments are refused, and nothing changes."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import forkserver
from engine.harness import FINISH, FIX_SCRIPT, TEST
from errand.tasks.comments import MAX_COMMENT_BYTES, MAX_COMMENTS

from .agents import Agents
from .conftest import Served, start_server, wait_state
from .settling import unchanged

pytestmark = pytest.mark.slow

AGAIN = [[TEST], [FINISH]]  # a follow-up round: the work is there already, it checks and finishes
COMMENTS = [
    {"path": "calc.py", "side": "new", "start_line": 1, "end_line": 2, "body": "Name the parameters left and right"},
    {"path": "calc.py", "start_line": 6, "body": "double() is off by one as well"},  # between hunks: from the file
    {"path": "calc.py", "side": "old", "start_line": 2, "end_line": 2, "body": "Say in a comment why it subtracted"},
]


@pytest.fixture
def agents() -> Iterator[Agents]:
    server = Agents(FIX_SCRIPT, AGAIN, AGAIN).start()
    yield server
    server.stop()


@pytest.fixture
def served(tmp_path: Path, agents: Agents) -> Iterator[Served]:
    server = start_server(tmp_path, env={"OPENAI_BASE_URL": f"{agents.url}/v1", "OPENAI_API_KEY": "sk-wire"})
    yield server
    server.stop()


def flat(text: str) -> str:
    """``text`` with each line's indent removed (the prompt may nest the comments in a list)."""
    return "\n".join(line.strip() for line in text.split("\n"))


def sent(agents: Agents, conversation: int, seconds: float = 180) -> str:
    """What the first request of ``conversation`` told the model (every message's text, unindented)."""
    deadline = time.monotonic() + seconds
    while not agents.seen.get(conversation):
        assert time.monotonic() < deadline, f"conversation {conversation} never started"
        time.sleep(0.1)
    return flat("\n".join(str(m.get("content") or "") for m in agents.seen[conversation][0]))


def cli(served: Served, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ERRAND_SERVER": served.url}
    return forkserver.run([*args], timeout=120, env=env)


def test_line_comments_sent_as_a_follow_up_reach_the_next_rounds_model_anchored(
        served: Served, agents: Agents, repo: Path) -> None:
    with served.client() as client:
        task = client.post("/api/tasks", json={"instruction": "Make test_calc.py pass", "repo": str(repo),
                                               "model": "openai:wire-model"}).json()
        task_id = task["id"]
        before = unchanged(client, task_id)
        assert before[0] == "ready_for_review"

        bad: list[tuple[dict[str, Any], str]] = [
            ({"comments": [{**COMMENTS[0], "path": "nope.py"}]}, "nope.py is not a file of the task's diff"),
            ({"comments": [{**COMMENTS[0], "start_line": 6, "end_line": 8}]}, "line 7 is not there"),
            ({"comments": [{**COMMENTS[2], "start_line": 7, "end_line": 7}]}, "calc.py has no line 7 on its old side"),
            ({"comments": [{**COMMENTS[0], "start_line": 3, "end_line": 2}]}, "is before its first"),
            ({"comments": [{**COMMENTS[0], "body": "   "}]}, "needs some text"),
            ({"comments": [{**COMMENTS[0], "body": "x" * (MAX_COMMENT_BYTES + 1)}]}, "is longer than"),
            ({"comments": [COMMENTS[0]] * (MAX_COMMENTS + 1)}, ""),
            ({"comments": [{**COMMENTS[0], "side": "middle"}]}, ""),
            ({"text": "  ", "comments": []}, "needs some text"),
            ({"text": "ok", "comments": [COMMENTS[0], {**COMMENTS[1], "path": "README.md"}]}, "README.md is not"),
        ]
        for body, says in bad:
            refused = client.post(f"/api/tasks/{task_id}/followup", json=body)
            assert refused.status_code == 422, (body, refused.text)
            assert says in json.dumps(refused.json()), refused.json()
            assert unchanged(client, task_id) == before, body  # no review, no event, no round
        assert len(agents.seen) == 1

        followed = client.post(f"/api/tasks/{task_id}/followup",
                               json={"text": "Tidy calc.py before it lands", "comments": COMMENTS})
        assert followed.status_code == 200, followed.text
        request = sent(agents, 1)
        assert "Tidy calc.py before it lands" in request
        assert flat("1. calc.py, lines 1-2 (new):\n"
                "   ```\n"
                "       1   def add(a, b):\n"
                "       2 +     return a + b\n"
                "   ```\n"
                "   Name the parameters left and right") in request
        assert flat("2. calc.py, line 6 (new):\n   ```\n       6       return x + x + 1\n   ```\n"
                "   double() is off by one as well") in request
        assert flat("3. calc.py, line 2 (old):\n   ```\n       2 -     return a - b\n   ```\n"
                "   Say in a comment why it subtracted") in request
        wait_state(client, task_id, "ready_for_review", "failed")

        # Kept in the conversation as sent: the event a person reads in `errand logs` and on the page.
        events = client.get(f"/api/tasks/{task_id}/events", params={"limit": 1000}).json()
        [said] = [e["data"] for e in events if e["kind"] == "followup"]
        assert said["note"] == "Tidy calc.py before it lands" and len(said["comments"]) == 3
        assert said["comments"][1]["quoted"] == [[6, " ", "    return x + x + 1"]]
        logs = cli(served, "logs", task_id)
        assert logs.returncode == 0, logs.stderr
        assert "calc.py, lines 1-2 (new)" in logs.stdout and "Name the parameters left and right" in logs.stdout
        page = client.get(f"/tasks/{task_id}").text
        assert "calc.py, lines 1-2 (new)" in page and "double() is off by one as well" in page

        # The same from the command line, through the server: a bad comment says why and changes nothing.
        before = unchanged(client, task_id)
        wrong = cli(served, "followup", task_id, "--comment", "calc.py:40: too far")
        assert wrong.returncode == 2, wrong.stderr
        assert wrong.stderr == "error: calc.py has no line 40 on its new side (it has lines 1-6)\n"
        shapeless = cli(served, "followup", task_id, "--comment", "calc.py line 2 is wrong")
        assert shapeless.returncode == 2 and "PATH:LINE: TEXT" in shapeless.stderr, shapeless.stderr
        assert unchanged(client, task_id) == before and len(agents.seen) == 2

        done = cli(served, "followup", task_id, "--comment", "calc.py:2: Keep this one line",
                   "--old-comment", "calc.py:1-2: The old add() for reference")
        assert done.returncode == 0, done.stderr
        request = sent(agents, 2)
        assert flat("1. calc.py, line 2 (new):\n   ```\n       2 +     return a + b\n   ```\n"
                    "   Keep this one line") in request
        assert flat("2. calc.py, lines 1-2 (old):\n   ```\n       1   def add(a, b):\n       2 -     return a - b\n"
                "   ```\n   The old add() for reference") in request
        wait_state(client, task_id, "ready_for_review", "failed")
