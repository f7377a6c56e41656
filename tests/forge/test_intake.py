"""A task from an issue (read in full, linked, its asker credited), a batch of them that leaves
issues whose task is still open, and a review round's instruction with each line comment that
opens a thread anchored and quoted (from the forge's hunk, else from the head it starts from)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.cli import script
from engine.harness import git
from errand.forge import IssueRef
from errand.forge.hosts.github import GitHubForge
from errand.forge.inbound.intake import Ask, followup_instruction, head_reader, short, submit_batch, submit_issue
from errand.forge.links import LinkStore
from errand.forge.records import ReviewComment
from errand.forge.timeline import IssueTaken, last_issue
from errand.tasks.events import Credited
from errand.tasks.lifecycle import TaskState
from errand.tasks.service import TaskService
from errand.tasks.store.tasks import TaskStore

from .conftest import REPO, TOKEN, Forged


@pytest.fixture
def service(tmp_path: Path) -> Iterator[TaskService]:
    with TaskStore.open(f"sqlite:///{tmp_path / 'errand.db'}") as store:
        yield TaskService(store)


def test_an_issue_becomes_a_queued_task_linked_to_it_with_its_asker_credited(
        forged: Forged, service: TaskService, tmp_path: Path) -> None:
    issue = forged.fake.add_issue(REPO, "add() subtracts instead of adding, which breaks every sum in the app",
                                  "add(2, 3) gives -1", labels=("bug",))
    forge = GitHubForge(TOKEN, base_url=forged.fake.api_url)
    links = LinkStore(service.engine)
    ref = IssueRef.of(REPO, issue["number"])
    ask = Ask("dev", "@errand please fix", comment_id=55, author_id=4242)
    task = submit_issue(service, links, forge, ref, repo=forged.project, model=script(tmp_path / "s.json", []),
                        ask=ask)
    assert task.state is TaskState.QUEUED
    assert task.title == f"add() subtracts instead of adding, which breaks every sum i… (#{ref.number})"
    assert task.instruction.startswith(f"Resolve issue {ref}: add() subtracts")
    assert "add(2, 3) gives -1" in task.instruction and "What was asked of you: @errand please fix" in task.instruction
    link = links.get(task.id)
    assert link is not None and (link.repo, link.issue, link.requested_by, link.comment_id) == (REPO, ref.number,
                                                                                                "dev", 55)
    assert last_issue(service, task.id) == IssueTaken(str(ref), issue["html_url"], "dev")
    [credit] = service.store.events(task.id, kinds=["credited"])
    assert Credited.of(credit).email.startswith("4242+dev@users.noreply.")


def test_a_label_credits_the_issues_author(forged: Forged, service: TaskService, tmp_path: Path) -> None:
    issue = forged.fake.add_issue(REPO, "t", "b", user="reporter")
    forge = GitHubForge(TOKEN, base_url=forged.fake.api_url)
    task = submit_issue(service, LinkStore(service.engine), forge, IssueRef.of(REPO, issue["number"]),
                        repo=forged.project, model=script(tmp_path / "s.json", []))
    [credit] = service.store.events(task.id, kinds=["credited"])
    assert Credited.of(credit).name == "reporter"


def test_a_batch_again_starts_only_the_issues_without_an_open_task(
        forged: Forged, service: TaskService, tmp_path: Path) -> None:
    first = forged.fake.add_issue(REPO, "one", "b", labels=("flaky",))
    forged.fake.add_issue(REPO, "not this", "b", labels=("docs",))
    forge = GitHubForge(TOKEN, base_url=forged.fake.api_url)
    links = LinkStore(service.engine)
    model = script(tmp_path / "s.json", [])
    batch = submit_batch(service, links, forge, REPO, "label:flaky", clone=forged.project, limit=10, model=model)
    assert [ref.number for ref, _ in batch.started] == [first["number"]] and batch.skipped == []
    second = forged.fake.add_issue(REPO, "two", "b", labels=("flaky",))
    again = submit_batch(service, links, forge, REPO, "label:flaky", clone=forged.project, limit=10, model=model)
    assert [ref.number for ref, _ in again.started] == [second["number"]]
    [(skipped, why)] = again.skipped
    assert skipped.number == first["number"] and why == f"task {batch.started[0][1].id} has it"
    assert again.id != batch.id and {link.task_id for link in links.listed(batch=again.id)} == {
        again.started[0][1].id}


def committed(clone: Path, name: str, text: str) -> Path:
    """A clone whose one commit holds ``name``."""
    clone.mkdir()
    git(clone, "init", "-q", "-b", "main")
    (clone / name).write_text(text)
    git(clone, "add", "-A")
    git(clone, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "c")
    return clone


def test_a_review_rounds_instruction_anchors_each_thread_it_opens(tmp_path: Path) -> None:
    clone = committed(tmp_path / "clone", "calc.py", "def add(a, b):\n    return a - b\n")
    head = git(clone, "rev-parse", "HEAD").strip()
    comments = [
        ReviewComment(1, "rev", "Should add", "calc.py", 2),  # quoted from the head
        ReviewComment(2, "rev", "Why?", "gone.py", 3, side="old",
                      diff_hunk="@@ -1,3 +1,1 @@\n keep\n-one\n-two"),  # quoted from the forge's hunk
        ReviewComment(3, "dev", "Done", "calc.py", 2, in_reply_to=1),  # a reply: no thread of its own
        ReviewComment(4, "rev", "<!-- hidden -->", "calc.py", 1),  # nothing visible: no thread
    ]
    text = followup_instruction("acme/calc", 7, "errand/fix", Ask("rev", "see my comments"), comments,
                                head_reader(clone, head))
    assert text.startswith("Review feedback on pull request #7 of acme/calc (branch errand/fix); ")
    assert "@rev asked: see my comments" in text and "(2 comments)" in text
    assert "1. calc.py, line 2 (new):\n   ```\n       2   " in text and "return a - b" in text
    assert "2. gone.py, line 3 (old):\n   ```\n       3 - two\n   ```\n   @rev: Why?" in text
    assert "Done" not in text and "hidden" not in text


def test_a_path_the_head_lacks_reads_as_nothing(tmp_path: Path) -> None:
    read = head_reader(committed(tmp_path / "clone", "a.txt", "a\n"), "HEAD")
    assert read("a.txt") == "a\n" and read("missing.txt") is None


@pytest.mark.parametrize(("text", "shortened"), [("  fix\n the   tests ", "fix the tests"), ("x" * 60, "x" * 60),
                                                 ("word " * 20, ("word " * 12).strip() + "…")])
def test_a_title_is_one_line_of_at_most_sixty_characters(text: str, shortened: str) -> None:
    assert short(text) == shortened and len(short(text)) <= 60
