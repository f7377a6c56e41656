"""The forge's tables: which task belongs to which issue and pull request, which webhook deliveries
were handled, and its bookkeeping of a round (what it asked, the question it posted, the CI fixes)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from errand.forge.links import Link, LinkStore, PostedQuestion, Round
from errand.tasks.store.tasks import TaskStore


@pytest.fixture
def store(tmp_path: Path) -> Iterator[TaskStore]:
    with TaskStore.open(f"sqlite:///{tmp_path / 'errand.db'}") as opened:
        yield opened


def task(store: TaskStore) -> str:
    return store.create_task(title="t", instruction="i", repo="/r").id


def link(task_id: str, repo: str = "acme/calc", **values: Any) -> Link:
    return Link(task_id, "github", "http://forge.test", repo, **values)


def test_a_link_is_found_by_its_task_issue_and_pull_request(store: TaskStore) -> None:
    links = LinkStore(store.engine)
    first, second, other = task(store), task(store), task(store)
    links.add(link(first, issue=4, requested_by="octo", comment_id=11))
    links.add(link(second, issue=4))
    links.add(link(other, repo="acme/other", issue=4))
    assert links.get(first) == link(first, issue=4, requested_by="octo", comment_id=11)
    assert links.get("no-such-task") is None
    assert {found.task_id for found in links.for_issue("acme/calc", 4)} == {first, second}
    assert links.for_issue("acme/calc", 5) == [] and links.for_pull("acme/calc", 4) is None
    opened = links.update(first, pull=9, pull_url="http://forge.test/pull/9", pull_branch="errand/4")
    assert (opened.pull, opened.pull_branch, opened.issue) == (9, "errand/4", 4)
    assert links.for_pull("acme/calc", 9) == opened and links.all_for_pull("acme/calc", 9) == [opened]
    assert links.for_pull("acme/other", 9) is None


def test_pending_until_pushed_to_a_pull_request(store: TaskStore) -> None:
    links = LinkStore(store.engine)
    waiting, pushed = task(store), task(store)
    links.add(link(waiting, issue=1))
    links.add(link(pushed, issue=2, pull=3, pull_branch="errand/2"))
    assert {found.task_id for found in links.pending()} == {waiting, pushed}
    links.update(pushed, pushed="b" * 40)
    assert [found.task_id for found in links.pending()] == [waiting]
    assert [found.task_id for found in links.pushed_pulls()] == [pushed]


def test_links_are_listed_by_repository_and_batch(store: TaskStore) -> None:
    links = LinkStore(store.engine)
    ids = [task(store) for _ in range(3)]
    links.add(link(ids[0], issue=1, batch="b-1"))
    links.add(link(ids[1], issue=2, batch="b-1"))
    links.add(link(ids[2], repo="acme/other", issue=3))
    assert {found.task_id for found in links.listed(batch="b-1")} == {ids[0], ids[1]}
    assert [found.task_id for found in links.listed(repo="acme/other")] == [ids[2]]
    assert len(links.listed(limit=2)) == 2
    [(batch, count, _)] = links.batches()
    assert (batch, count) == ("b-1", 2)


def test_a_redelivered_webhook_is_known_and_keeps_its_outcome(store: TaskStore) -> None:
    links = LinkStore(store.engine)
    assert links.first_delivery("d-1", "issues")
    assert links.outcome("d-1") is None
    links.delivered("d-1", "started t-1")
    assert not links.first_delivery("d-1", "issues")
    assert links.outcome("d-1") == "started t-1"
    assert links.outcome("d-2") is None


def test_a_round_its_question_and_its_ci_fixes_are_kept_once(store: TaskStore) -> None:
    links = LinkStore(store.engine)
    round_task = task(store)
    assert links.round(round_task) is None and links.posted(round_task) is None
    asked = Round(round_task, 7, "errand/fix", "a" * 40, requested_by="octo", threads=(3, 4), ci=True)
    links.add_round(asked)
    assert links.round(round_task) == asked
    links.post(PostedQuestion(round_task, 21, 7, 500))
    links.post(PostedQuestion(round_task, 22, 7, 501))  # a second question replaces the first
    assert links.posted(round_task) == PostedQuestion(round_task, 22, 7, 501)
    assert not links.fix_asked(round_task, "c" * 40)
    links.ask_fix(round_task, "c" * 40, "t-fix")
    links.ask_fix(round_task, "c" * 40, "t-again")  # asked already: no error, the first stands
    assert links.fix_asked(round_task, "c" * 40) and not links.fix_asked(round_task, "d" * 40)
