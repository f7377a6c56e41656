"""``errand followup --comment`` on this machine's store, as a person types it: the next round's
model request (the real ``openai`` SDK against a loopback server that records it) carries each
comment anchored; a comment the diff cannot hold is a one-line error and changes nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.cli import errand, errand_json
from engine.harness import FINISH, FIX_SCRIPT, TEST, make_repo
from server.agents import Agents
from server.test_line_comments import flat, sent

pytestmark = pytest.mark.slow


@pytest.fixture
def agents() -> Iterator[Agents]:
    server = Agents(FIX_SCRIPT, [[TEST], [FINISH]]).start()
    yield server
    server.stop()


def test_followup_with_comments_on_the_command_line_reaches_the_next_round_anchored(
        errand_home: Path, tmp_path: Path, agents: Agents) -> None:
    env = {"OPENAI_BASE_URL": f"{agents.url}/v1", "OPENAI_API_KEY": "sk-wire"}
    repo = make_repo(tmp_path / "project")
    ran = errand(errand_home, "run", "Make test_calc.py pass", "--repo", str(repo), "--model", "openai:wire-model",
                 "--json", env=env)
    assert ran.returncode == 0, ran.stderr
    task = json.loads(ran.stdout)
    assert errand(errand_home, "logs", "-f", task["id"], env=env).returncode == 0
    assert errand_json(errand_home, "show", task["id"])["state"] == "ready_for_review"
    logs = errand(errand_home, "logs", task["id"]).stdout

    for said, error in [
        (["--comment", "README.md:1: not in the diff"], "error: README.md is not a file of the task's diff "
                                                        "(its files: calc.py)"),
        (["--old-comment", "calc.py:5-9: past the end"], "error: lines 5-9 of calc.py (old side): line 7 is not "
                                                        "there (it has lines 1-6)"),
        (["--comment", "calc.py:2:   "], "error: the comment on calc.py:2 needs some text"),
        (["--comment", "calc.py:3-1: backwards"], "error: the comment on calc.py:3: its last line (1) is before "
                                                  "its first (3)"),
    ]:
        refused = errand(errand_home, "followup", task["id"], *said, env=env)
        assert (refused.returncode, refused.stderr) == (2, error + "\n")
    assert errand_json(errand_home, "show", task["id"])["state"] == "ready_for_review"
    assert errand(errand_home, "logs", task["id"]).stdout == logs  # nothing was said, no round started
    assert len(agents.seen) == 1

    done = errand(errand_home, "followup", task["id"], "Keep add() small",
                  "--comment", "calc.py:2: a comment on why", "--old-comment", "calc.py:2: this was the bug", env=env)
    assert done.returncode == 0, done.stderr
    request = sent(agents, 1)
    assert "Keep add() small" in request
    assert flat("1. calc.py, line 2 (new):\n```\n    2 +     return a + b\n```\na comment on why") in request
    assert flat("2. calc.py, line 2 (old):\n```\n    2 -     return a - b\n```\nthis was the bug") in request
    assert errand(errand_home, "logs", "-f", task["id"], env=env).returncode == 0
    shown = errand(errand_home, "logs", task["id"]).stdout
    assert "calc.py, line 2 (old):" in shown and "this was the bug" in shown
    # `errand show` says what each follow-up asked, its comments by file and line, as text and as JSON.
    said = errand(errand_home, "show", task["id"]).stdout
    assert "follow-ups (1, each a round of its own):" in said
    assert "- Keep add() small" in said
    assert "calc.py:2 (new) a comment on why" in said and "calc.py:2 (old) this was the bug" in said
    [followup] = errand_json(errand_home, "show", task["id"])["followups"]
    assert followup["note"] == "Keep add() small"
    assert [(c["path"], c["start_line"], c["side"], c["body"]) for c in followup["comments"]] == [
        ("calc.py", 2, "new", "a comment on why"), ("calc.py", 2, "old", "this was the bug")]
