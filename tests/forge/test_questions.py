"""A task's question asked on the forge where the ask came from, once per question, pinging only
the person who asked; and the reply there finding the task that waits for it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from errand.forge.hosts.github import GitHubForge
from errand.forge.links import Link, LinkStore, PostedQuestion, Round
from errand.forge.questions import asked_on, is_the_question, post_question, waiting_task
from errand.tasks.lifecycle import TaskState
from errand.tasks.service import TaskService
from errand.tasks.store.tasks import TaskStore

from .conftest import REPO, TOKEN, Forged


@pytest.fixture
def service(tmp_path: Path) -> Iterator[TaskService]:
    with TaskStore.open(f"sqlite:///{tmp_path / 'errand.db'}") as store:
        yield TaskService(store)


def asking(service: TaskService, question: str) -> str:
    """A task that stopped with ``question``."""
    task = service.store.create_task(title="t", instruction="i", repo="/r")
    for state in (TaskState.PREPARING, TaskState.RUNNING, TaskState.NEEDS_INPUT):
        service.store.set_state(task.id, state)
    service.store.append_event(task.id, None, "question", {"text": question})
    return task.id


def test_the_question_is_posted_once_where_it_was_asked_quoted_and_pinging_only_the_asker(
        forged: Forged, service: TaskService) -> None:
    issue = forged.fake.add_issue(REPO, "add() subtracts", "b")
    forge = GitHubForge(TOKEN, base_url=forged.fake.api_url)
    links = LinkStore(service.engine)
    task_id = asking(service, "Keep add() or rename it?\nAsk @team if unsure.")
    link = links.add(Link(task_id, "github", forged.fake.api_url, REPO, issue=issue["number"], requested_by="dev"))
    assert post_question(service, links, forge, link)
    [comment] = forged.fake.repos[REPO].comments[issue["number"]]
    assert comment["body"] == (f"@dev errand's task `{task_id}` has a question:\n\n> Keep add() or rename it?\n"
                               "> Ask @\u2060team if unsure.\n\nReply here to answer it.")
    posted = links.posted(task_id)
    assert posted is not None and (posted.number, posted.comment_id) == (issue["number"], comment["id"])
    assert is_the_question(links, link, comment["id"]) and not is_the_question(links, link, comment["id"] + 1)
    assert [e.data["on"] for e in service.store.events(task_id, kinds=["forge_question_posted"])] == [
        issue["number"]]
    assert not post_question(service, links, forge, link)  # the same question: not again
    assert len(forged.fake.repos[REPO].comments[issue["number"]]) == 1


def test_no_question_is_posted_for_a_task_that_does_not_wait(forged: Forged, service: TaskService) -> None:
    issue = forged.fake.add_issue(REPO, "t", "b")
    forge = GitHubForge(TOKEN, base_url=forged.fake.api_url)
    links = LinkStore(service.engine)
    task_id = service.store.create_task(title="t", instruction="i", repo="/r").id
    link = links.add(Link(task_id, "github", forged.fake.api_url, REPO, issue=issue["number"]))
    assert not post_question(service, links, forge, link)
    assert forged.fake.repos[REPO].comments[issue["number"]] == []
    assert not is_the_question(links, link, None)


def test_the_reply_finds_the_waiting_task_of_its_issue_pull_request_or_fork(service: TaskService) -> None:
    links = LinkStore(service.engine)
    done = service.store.create_task(title="t", instruction="i", repo="/r").id
    links.add(Link(done, "github", "http://forge.test", REPO, issue=4))
    waiting = asking(service, "Which base?")
    links.add(Link(waiting, "github", "http://forge.test", REPO, issue=4, pull=9, pull_branch="errand/4"))
    fork_round = asking(service, "Tabs?")
    links.add(Link(fork_round, "github", "http://forge.test", REPO))
    links.add_round(Round(fork_round, 12, "someone:fix", "a" * 40, fork="someone/calc", fork_pull=12))
    found = waiting_task(service, links, REPO, 4)
    assert found is not None and found.task_id == waiting
    found = waiting_task(service, links, REPO, 9, pull=True)
    assert found is not None and found.task_id == waiting
    fork = waiting_task(service, links, REPO, 12)
    assert fork is not None and fork.task_id == fork_round and asked_on(links, fork) == 12
    assert waiting_task(service, links, REPO, 5) is None and waiting_task(service, links, "acme/other", 4) is None
    assert asked_on(links, found) is None  # a round with a pull request of its own was not asked on a fork's
    links.post(PostedQuestion(waiting, 1, 4, None))
    assert not is_the_question(links, found, None)  # a question posted without its comment id matches nothing
