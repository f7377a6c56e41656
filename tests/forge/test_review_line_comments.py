"""A pull request review with line comments becomes one round whose model request carries every
comment anchored as a follow-up's are (file, lines, side, the lines quoted, who said what), on a
real ``errand serve`` fed by the loopback GitHub. The agent runs on the real ``openai`` SDK
against a loopback server that records what it is sent."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from engine.harness import FINISH, TEST, git
from server.agents import Agents
from server.conftest import Served, start_server
from server.test_line_comments import flat, sent

from .conftest import REPO, Forged, eventually, state

pytestmark = pytest.mark.slow


@pytest.fixture
def agents() -> Iterator[Agents]:
    server = Agents([[TEST], [FINISH]]).start()
    yield server
    server.stop()


@pytest.fixture
def served(forged: Forged, tmp_path: Path, agents: Agents) -> Iterator[Served]:
    (forged.home / "forge.toml").write_text(f'[github]\nbase_url = "{forged.fake.api_url}"\n\n'
                                            f'[github.repos."{REPO}"]\npath = "{forged.project}"\n'
                                            'model = "openai:wire-model"\n')
    server = start_server(tmp_path, env={**forged.env, "OPENAI_BASE_URL": f"{agents.url}/v1",
                                         "OPENAI_API_KEY": "sk-wire"})
    yield server
    server.stop()


def person_branch(forged: Forged, branch: str) -> None:
    """A person's branch of the repository that fixes add() and double()."""
    clone = forged.project.parent / "person"
    git(forged.project.parent, "clone", "-q", str(forged.fake.repos[REPO].bare), str(clone))
    git(clone, "switch", "-q", "-c", branch)
    calc = (clone / "calc.py").read_text()
    (clone / "calc.py").write_text(calc.replace("return a - b", "return a + b").replace("x + x + 1", "x + x"))
    git(clone, "-c", "user.name=Person", "-c", "user.email=p@example.com", "commit", "-qam", "fix both")
    git(clone, "push", "-q", "origin", branch)


@pytest.mark.parametrize(("said", "asked", "order", "outcomes"), [
    ("@errand please see to these", "@acme asked: please see to these", [0, 1, 2],
     ["followed_up", "duplicate", "duplicate"]),
    ("", "@acme asked: name them left and right", [0, 1, 2], ["ignored", "followed_up", "duplicate"]),  # comments ask
    # A bad day: the second comment arrives first, the review last, and the first delivery is sent again
    # with its own id (a redelivery): still one round, with the review's body and both comments.
    ("@errand please see to these", "@acme asked: please see to these", [2, 1, 0, 2],
     ["followed_up", "duplicate", "duplicate", "duplicate"]),
], ids=["review-first", "comments-ask", "out-of-order-and-redelivered"])
def test_a_review_with_two_line_comments_is_one_round_with_both_anchored_in_its_request(
        forged: Forged, served: Served, agents: Agents, said: str, asked: str, order: list[int],
        outcomes: list[str]) -> None:
    fake, hook = forged.fake, f"{served.url}/api/forge/github/webhook"
    person_branch(forged, "fix-both")
    pull = fake.open_fork_pull(REPO, REPO, "fix-both", "Fix add and double", user="acme", maintainer_can_modify=True)
    review_id = fake.new_id()
    lines = [fake.add_review_comment(REPO, pull["number"], "@errand name them left and right", path="calc.py",
                                     start_line=1, line=2, user="acme", review_id=review_id),
             fake.add_review_comment(REPO, pull["number"], "@errand say why there was a + 1", path="calc.py",
                                     line=6, side="LEFT", user="acme", review_id=review_id)]
    review = {"id": review_id, "body": said, "user": fake.user("acme"),
              "state": "COMMENTED"}
    fake.repos[REPO].reviews.setdefault(pull["number"], []).append(review)
    base = {"pull_request": pull, "repository": {"full_name": REPO}, "sender": fake.user("acme")}
    deliveries: list[tuple[str, dict[str, Any], str]] = [
        ("pull_request_review", {**base, "action": "submitted", "review": review}, str(uuid.uuid4())),
        *(("pull_request_review_comment", {**base, "action": "created", "comment": line}, str(uuid.uuid4()))
          for line in lines)]
    acted = []
    for event, payload, delivery in (deliveries[n] for n in order):
        answer = fake.deliver(hook, event, payload, delivery=delivery)
        assert answer.status_code in (200, 202), answer.text
        acted.append(answer.json()["action"])
    assert acted == outcomes  # one review, one round
    [task] = httpx.get(f"{served.url}/api/tasks", timeout=30).json()["tasks"]

    request = sent(agents, 0)
    assert asked in request
    assert flat("1. calc.py, lines 1-2 (new):\n```\n    1   def add(a, b):\n    2 +     return a + b\n```\n"
                "@acme: @errand name them left and right") in request
    assert flat("2. calc.py, line 6 (old):\n```\n    6 -     return x + x + 1\n```\n"
                "@acme: @errand say why there was a + 1") in request
    assert len(agents.seen) == 1
    eventually("the round ends", lambda: state(served, task["id"]) in ("ready_for_review", "failed"), seconds=240)
