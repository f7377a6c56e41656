"""The forge loop on GitHub's bad day, through a real ``errand serve``: the webhook of errand's
own comment arrives before the call that wrote it returns, deliveries repeat and cross, one
review comes in several deliveries, and a command is typed while a question waits."""

from __future__ import annotations

import subprocess
import threading
import uuid
from typing import Any

import httpx
import pytest

from server.conftest import Served

from .conftest import REPO, Forged, eventually, state
from .fakegithub import ME

pytestmark = [pytest.mark.faults, pytest.mark.slow]


def asking(forged: Forged, served: Served) -> tuple[int, str, dict[str, Any]]:
    """An issue whose task waits on its question, posted while the forge echoes errand's comments."""
    fake = forged.fake
    fake.echo_to = f"{served.url}/api/forge/github/webhook"
    number = fake.add_issue(REPO, "add() subtracts", "add(2, 3) gives -1")["number"]
    asked = fake.add_comment(REPO, number, "@errand fix this please", user="acme")
    payload = fake.issue_payload(REPO, number, "created", comment=asked)
    started = fake.deliver(fake.echo_to, "issue_comment", payload)
    assert started.status_code == 202, started.text
    task_id = started.json()["task_id"]
    eventually("the question is posted and its echo heard twice", lambda: len(
        [body for body, _, _ in fake.echoes if "has a question" in body]) == 2)
    return number, task_id, payload


def answers(served: Served, task_id: str) -> list[str]:
    events = httpx.get(f"{served.url}/api/tasks/{task_id}/events", params={"limit": 1000}, timeout=30).json()
    return [e["data"]["text"] for e in events if e["kind"] == "answer_sent"]


def test_errand_never_takes_its_own_comments_as_the_answer(forged: Forged, served_asking: Served) -> None:
    fake, served = forged.fake, served_asking
    number, task_id, payload = asking(forged, served)
    # The echo of errand's question came before errand knew the comment's id: it was no answer.
    heard = [(body, answer) for body, _, answer in fake.echoes if "has a question" in body]
    assert [answer["action"] for _, answer in heard] == ["ignored", "duplicate"], heard
    assert "errand's own writing" in heard[0][1]["detail"]
    assert state(served, task_id) == "needs_input" and answers(served, task_id) == []

    # errand's own notices, delivered while the question waits: no answer either.
    for said in (f"errand pushed 0123456789ab to `errand/{task_id}-x` (task `{task_id}`): done.",
                 f"errand opened {fake.url}/{REPO}/pull/9 for this issue (task `{task_id}`).",
                 "@errand yes, floats too"):
        own = fake.add_comment(REPO, number, said, user=ME)
        ignored = fake.deliver(fake.echo_to or "", "issue_comment", {**payload, "comment": own})
        assert ignored.json()["action"] == "ignored", ignored.text
    assert state(served, task_id) == "needs_input" and answers(served, task_id) == []

    reply = fake.add_comment(REPO, number, "Integers only.", user="acme")
    delivery = str(uuid.uuid4())
    answered = fake.deliver(fake.echo_to or "", "issue_comment", {**payload, "comment": reply}, delivery=delivery)
    assert answered.json()["action"] == "answered", answered.text
    again = fake.deliver(fake.echo_to or "", "issue_comment", {**payload, "comment": reply}, delivery=delivery)
    assert again.json()["action"] == "duplicate"
    eventually("the run resumes and finishes", lambda: state(served, task_id) == "ready_for_review")
    assert answers(served, task_id) == ["Integers only."]


def test_a_command_while_a_question_waits_is_a_command(forged: Forged, served_asking: Served) -> None:
    fake, served = forged.fake, served_asking
    number, task_id, payload = asking(forged, served)
    command = fake.add_comment(REPO, number, "@errand accept", user="acme")
    said = fake.deliver(fake.echo_to or "", "issue_comment", {**payload, "comment": command})
    assert said.status_code == 200 and said.json()["action"] == "ignored", said.text
    assert "still open" in said.json()["detail"]
    reply = fake.repos[REPO].comments[number][-1]
    assert reply["user"]["login"] == ME and "@acme nothing of errand's here waits for an accept" in reply["body"]
    assert f"Task `{task_id}`'s question is still open" in reply["body"]
    assert state(served, task_id) == "needs_input" and answers(served, task_id) == []

    answer = fake.add_comment(REPO, number, "@errand integers only", user="acme")
    answered = fake.deliver(fake.echo_to or "", "issue_comment", {**payload, "comment": answer})
    assert answered.json()["action"] == "answered", answered.text
    assert answers(served, task_id) == ["integers only"]


def test_one_review_is_one_round_however_its_deliveries_come(forged: Forged, served: Served) -> None:
    fake, hook = forged.fake, f"{served.url}/api/forge/github/webhook"
    fake.echo_to = hook
    bare = fake.repos[REPO].bare
    subprocess.run(["git", "branch", "tidy", "main"], cwd=bare, check=True)
    pull = fake.open_fork_pull(REPO, REPO, "tidy", "Tidy the names", user="acme", maintainer_can_modify=False)
    review_id = fake.new_id()
    lines = [fake.add_review_comment(REPO, pull["number"], f"@errand rename {name}", path="calc.py", line=line,
                                     user="acme") for line, name in ((1, "a"), (2, "b"))]
    for line in lines:
        line["pull_request_review_id"] = review_id  # the review's own line comments
    review = {"id": review_id, "body": "@errand tidy the names", "user": fake.user("acme"), "state": "COMMENTED"}
    fake.repos[REPO].reviews.setdefault(pull["number"], []).append(review)
    base = {"pull_request": pull, "repository": {"full_name": REPO}, "sender": fake.user("acme")}
    sent = [("pull_request_review_comment", {**base, "action": "created", "comment": line}, str(uuid.uuid4()))
            for line in lines]
    sent.append(("pull_request_review", {**base, "action": "submitted", "review": review}, str(uuid.uuid4())))

    outcomes: list[dict[str, Any]] = []

    def deliver(event: str, payload: dict[str, Any], delivery: str) -> None:
        answer = fake.deliver(hook, event, payload, delivery=delivery)
        assert answer.status_code in (200, 202), answer.text
        outcomes.append(answer.json())

    # The review's three deliveries at once, then each again and in reverse order.
    racing = [threading.Thread(target=deliver, args=part) for part in sent]
    for thread in racing:
        thread.start()
    for thread in racing:
        thread.join()
    for part in reversed(sent):
        deliver(*part)
    tasks = httpx.get(f"{served.url}/api/tasks", timeout=30).json()["tasks"]
    assert len(tasks) == 1, tasks
    assert sorted(o["action"] for o in outcomes) == ["duplicate"] * 5 + ["followed_up"], outcomes
    detail = httpx.get(f"{served.url}/api/tasks/{tasks[0]['id']}", timeout=30).json()
    assert "@acme asked: tidy the names" in detail["instruction"]  # whichever part came first
    assert "calc.py, line 1 (new):" in detail["instruction"]
    assert "@acme: @errand rename a" in detail["instruction"]
    assert "calc.py, line 2 (new):" in detail["instruction"]
    assert "@acme: @errand rename b" in detail["instruction"]
    picked = [c for c in fake.repos[REPO].comments[pull["number"]] if c["body"].startswith("errand is on it")]
    assert len(picked) == 1
