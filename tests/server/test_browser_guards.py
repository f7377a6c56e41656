"""The page's guards in a real browser at 1280 and 390 px: an accept of a diff whose tests fail
and that deletes a file asks first (and going back changes nothing); Cancel, Terminate and
Remove each take a confirm step; on a phone the review page shows the diff before the
decision, and neither the task nor the review page scrolls sideways."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli.test_guards import branch_exists, risky_task
from components import needs
from engine.cli import errand, stop_worker
from engine.harness import make_repo
from errand.memory import MemoryStore, Provenance, project_key

from .browsing import NARROW, Person
from .conftest import start_server

pytestmark = [pytest.mark.slow, needs("chromium")]
playwright = pytest.importorskip("playwright.sync_api")


def test_accept_cancel_terminate_and_remove_ask_first(tmp_path: Path, browser: playwright.Browser,
                                                      artifacts: Path) -> None:
    home = tmp_path / "home"
    try:
        repo, risky = risky_task(home, tmp_path)
    finally:
        stop_worker(home)  # before the next task is queued: it stays queued, no worker runs it
    other = make_repo(tmp_path / "other")
    queued = errand(home, "run", "Wait in the queue", "--repo", str(other), "--model", "scripted:/dev/null",
                    "--no-worker", "--json")
    assert queued.returncode == 0, queued.stderr
    waiting = json.loads(queued.stdout)["id"]
    database = f"sqlite:///{home / 'errand.db'}"
    with MemoryStore.open(database, embedder=None) as memories:
        memory = memories.add(project_key(repo), "Run the tests with python3 test_calc.py", kind="command",
                              provenance=Provenance.task(str(risky["id"]), 1, "test command"))
    created = errand(home, "sandbox", "create", "--timeout", "600")
    assert created.returncode == 0, created.stderr
    sandbox_id = created.stdout.split()[0]
    served = start_server(tmp_path, "--no-engine", env={"ERRAND_HOME": str(home), "ERRAND_DATABASE_URL": database})
    try:
        person = Person(browser, served.url, artifacts)
        _accept(person, str(risky["id"]), repo, str(risky["branch"]))
        _cancel(person, waiting)
        _terminate(person, sandbox_id, home)
        _remove(person, memory.id)
        assert person.errors == []
    finally:
        served.stop()
        errand(home, "sandbox", "rm", "--yes", sandbox_id)


def _accept(person: Person, task_id: str, repo: Path, branch: str) -> None:
    page, narrow, expect = person.page, person.narrow, playwright.expect
    for on in (narrow, page):
        on.goto(f"{person.base}/tasks/{task_id}")
        assert on.evaluate("document.documentElement.scrollWidth") <= on.viewport_size["width"]
    narrow.goto(f"{person.base}/tasks/{task_id}/review")
    assert narrow.evaluate("document.documentElement.scrollWidth") <= NARROW["width"]
    diff_at = narrow.get_by_role("heading", name="Diff of attempt 1").bounding_box()
    decide_at = narrow.get_by_role("heading", name="Decide").bounding_box()
    assert diff_at is not None and decide_at is not None and diff_at["y"] < decide_at["y"], (diff_at, decide_at)

    page.goto(f"{person.base}/tasks/{task_id}/review")
    person.shoot("guard-1-review-risky")
    note = page.get_by_role("note", name="Before you accept")
    expect(note).to_contain_text("tests fail after the change")
    expect(note).to_contain_text("deletes 1 file(s): NOTES.md")
    accept = page.get_by_role("button", name="Accept attempt 1")
    expect(accept).not_to_have_class("primary")
    accept.click()
    expect(page.get_by_role("heading", name=f"Accept attempt 1 of task {task_id} anyway?")).to_be_visible()
    reasons = page.get_by_role("list", name="Why it asks")
    for reason in ("tests fail after the change", "confidence in it is low", "deletes 1 file(s): NOTES.md"):
        expect(reasons).to_contain_text(reason)
    page.screenshot(path=str(person.artifacts / "guard-2-confirm-accept-1280.png"), full_page=True)
    page.get_by_role("link", name="No, go back").click()
    expect(page.get_by_role("heading", name="Decide")).to_be_visible()
    assert not branch_exists(repo, branch)

    page.get_by_role("button", name="Accept attempt 1").click()
    page.get_by_role("button", name="Accept attempt 1 anyway").click()
    expect(page.locator("#facts [data-state]")).to_have_text("accepted")
    assert branch_exists(repo, branch)


def _asks_then_does(page: playwright.Page, button: str, heading: str, confirm: str) -> None:
    """Click ``button``: its confirm step (``heading``) comes, going back changes nothing, and
    clicking it again and then ``confirm`` does it.

    The confirm step is seen gone before ``button`` is looked for again: ``button`` and ``confirm``
    may have one name (``Terminate sb-…``), and on a loaded machine the step's own button, still
    shown while going back was under way, was taken for the page's, clicked, and the sandbox ended
    before its confirm step was asked for."""
    expect = playwright.expect
    page.get_by_role("button", name=button).click()
    expect(page.get_by_role("heading", name=heading)).to_be_visible()
    page.get_by_role("link", name="No, go back").click()
    expect(page.get_by_role("heading", name=heading)).to_have_count(0)
    expect(page.get_by_role("button", name=button)).to_be_visible()
    page.get_by_role("button", name=button).click()
    expect(page.get_by_role("heading", name=heading)).to_be_visible()
    page.get_by_role("button", name=confirm).click()


def _cancel(person: Person, task_id: str) -> None:
    page, expect = person.page, playwright.expect
    page.goto(f"{person.base}/tasks/{task_id}")
    page.get_by_role("button", name="Cancel task").click()
    page.screenshot(path=str(person.artifacts / "guard-3-confirm-cancel-1280.png"), full_page=True)
    page.get_by_role("link", name="No, go back").click()
    _asks_then_does(page, "Cancel task", f"Cancel task {task_id}?", "Cancel the task")
    expect(page.locator("#facts [data-state]")).to_have_text("cancelled")


def _terminate(person: Person, sandbox_id: str, home: Path) -> None:
    page, expect = person.page, playwright.expect
    page.goto(f"{person.base}/sandboxes")
    _asks_then_does(page, f"Terminate {sandbox_id}", f"Terminate {sandbox_id}?", f"Terminate {sandbox_id}")
    expect(page.get_by_role("heading", name="Sandboxes")).to_be_visible()
    expect(page.get_by_role("button", name=f"Terminate {sandbox_id}")).to_have_count(0)
    assert sandbox_id not in errand(home, "sandbox", "ls", "--json").stdout


def _remove(person: Person, memory_id: int) -> None:
    page, expect = person.page, playwright.expect
    page.goto(f"{person.base}/memory")
    _asks_then_does(page, f"Remove memory {memory_id}", f"Remove memory {memory_id} for good?",
                    f"Remove memory {memory_id}")
    expect(page.get_by_role("button", name=f"Remove memory {memory_id}")).to_have_count(0)
