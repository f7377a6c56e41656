"""A red check on errand's pull request gets its fix once no newer round of that pull request
is in progress: a newer round that failed pushed nothing and stops nothing. The publisher's
catch-up pass runs as ``errand serve`` runs it, against the loopback GitHub and its git remote."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from engine.cli import script
from errand.forge.hosts.github import GitHubForge
from errand.forge.links import Link, LinkStore
from errand.forge.outbound.publish import Publisher, catch_up
from errand.tasks.service import TaskService
from errand.tasks.store.tasks import TaskStore

from .conftest import REPO, TOKEN, Forged

pytestmark = pytest.mark.faults
BRANCH = "errand/t-1-fix-add"


def red(forged: Forged, sha: str) -> None:
    forged.fake.repos[REPO].check_runs[sha] = [{"name": "tests", "status": "completed", "conclusion": "failure",
                                                "html_url": f"{forged.fake.url}/runs/9",
                                                "output": {"title": "1 failed", "summary": "test_add FAILED"}}]


@dataclass
class Rounds:
    store: TaskStore
    service: TaskService
    links: LinkStore
    sha: str  # the red commit, errand's first round's, on the pull request's branch
    first: str
    model: str

    def publisher(self, forged: Forged) -> Publisher:
        forge = GitHubForge(TOKEN, base_url=forged.fake.api_url)
        return Publisher(self.service, self.links, forge, TOKEN, ci_fix_attempts=1)

    def newer(self, forged: Forged, *, pushed: str | None = None) -> str:
        """A newer round of the same pull request (``pushed``: the commit it put there)."""
        task = self.service.submit("also subtract", repo=forged.project, model=self.model, parent_id=self.first)
        self.links.add(Link(task.id, "github", forged.fake.api_url, REPO, issue=1, pull=2, pull_branch=BRANCH,
                            pushed=pushed))
        return task.id


@pytest.fixture
def rounds(forged: Forged) -> Iterator[Rounds]:
    """A pull request whose branch holds errand's accepted round, its checks red."""
    fake = forged.fake
    subprocess.run(["git", "branch", BRANCH, "main"], cwd=fake.repos[REPO].bare, check=True)
    sha = str(fake.branch_head(REPO, BRANCH))
    model = script(forged.home / "none.json", [])
    with TaskStore.open() as store:
        service = TaskService(store, memory=None)
        links = LinkStore(store.engine)
        first = service.submit("fix add()", repo=forged.project, model=model)
        for target in ("preparing", "running", "ready_for_review", "accepted"):
            store.set_state(first.id, target)
        links.add(Link(first.id, "github", fake.api_url, REPO, issue=1, pull=2, pull_url=f"{fake.url}/{REPO}/pull/2",
                       pull_branch=BRANCH, pushed=sha))
        red(forged, sha)
        yield Rounds(store, service, links, sha, first.id, model)


@pytest.mark.parametrize("newer_ends", ["failed", "cancelled", "rejected"])
def test_a_newer_round_holds_a_red_checks_fix_only_while_it_is_in_progress(forged: Forged, rounds: Rounds,
                                                                            newer_ends: str) -> None:
    store, publisher = rounds.store, rounds.publisher(forged)
    newer = rounds.newer(forged)
    for target in ("preparing", "running"):
        store.set_state(newer, target)

    catch_up(publisher)  # the newer round may still push: its commit is the one CI will judge
    assert len(store.list_tasks()) == 2
    if newer_ends == "rejected":
        store.set_state(newer, "ready_for_review")
    store.set_state(newer, newer_ends)

    catch_up(publisher)  # it ended without pushing: the red commit is still the branch's head
    fixes = [t for t in store.list_tasks() if t.id not in (rounds.first, newer)]
    assert len(fixes) == 1, fixes
    assert "CI failed on" in fixes[0].instruction and "test_add FAILED" in fixes[0].instruction
    catch_up(publisher)
    assert len(store.list_tasks()) == 3  # one fix for one red commit


def test_a_newer_round_that_pushed_supersedes_the_red_commit(forged: Forged, rounds: Rounds) -> None:
    rounds.newer(forged, pushed="ab" * 20)
    catch_up(rounds.publisher(forged))
    assert len(rounds.store.list_tasks()) == 2
