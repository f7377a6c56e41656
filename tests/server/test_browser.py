"""A person in a real browser (Debian's Chromium, driven by Playwright) creates a task,
watches it live, answers its question, reviews the diff and accepts it. Screenshots of
every page, at 1280 and 390 pixels wide, are written to the directory the test prints.
A second person sees the memories a task was given and approves a proposed memory."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from components import needs
from engine.harness import FINISH, FIX, READ, TEST, git
from errand.memory import MemoryStore, Provenance, project_key
from models.wire import WireServer

from .browsing import Person
from .conftest import Served, queue_turns

pytestmark = [pytest.mark.slow, needs("chromium")]
playwright = pytest.importorskip("playwright.sync_api")
ASK = ("ask_user", {"question": "Should add() accept strings too?"})


def test_create_watch_answer_review_accept(serve: Callable[..., Served], wire: WireServer, repo: Path,
                                           browser: playwright.Browser, artifacts: Path) -> None:
    queue_turns(wire, [[READ], [ASK], [FIX], [TEST], [FINISH]])
    served = serve()
    person = Person(browser, served.url, artifacts)
    page, expect = person.page, playwright.expect

    page.goto(served.url)
    page.keyboard.press("Tab")
    expect(page.get_by_role("link", name="Skip to content")).to_be_focused()
    person.shoot("1-tasks-empty")
    form = page.get_by_role("region", name="New task")
    form.get_by_label("Repository").fill(str(repo))
    form.get_by_label("Instruction").fill("Make test_calc.py pass")
    form.get_by_label("Model").fill("openai:wire-model")
    form.get_by_label("Attempts").fill("1")
    form.get_by_role("button", name="Start task").click()

    expect(page.get_by_role("heading", name="Make test_calc.py pass")).to_be_visible(timeout=60_000)  # a loaded server
    log = page.get_by_role("list", name="Agent steps and commands")
    expect(log).to_contain_text("read_file", timeout=60_000)  # arrived live, after the page loaded
    expect(page.get_by_text("The agent asks: Should add() accept strings too?")).to_be_visible(timeout=60_000)
    person.shoot("2-task-question")

    page.goto(f"{served.url}/sandboxes")
    expect(page.get_by_role("heading", name="Sandboxes")).to_be_visible()
    expect(page.get_by_role("button", name="Terminate sb-")).to_be_visible()  # the paused task's sandbox
    person.shoot("3-sandboxes")
    page.go_back()

    page.get_by_label("Your answer").fill("No, numbers only.")
    page.get_by_role("button", name="Send answer").click()
    expect(log).to_contain_text("answer delivered", timeout=60_000)
    expect(log).to_contain_text("$ python3 test_calc.py", timeout=60_000)
    review_link = page.get_by_role("link", name="Review the diff")
    expect(review_link).to_be_visible(timeout=120_000)
    expect(page.locator("[data-state]")).to_have_text("ready for review")
    person.shoot("4-task-ready")

    review_link.click()
    expect(page.get_by_role("heading", name="Diff of attempt 1")).to_be_visible()
    calc = page.locator("details.file", has_text="calc.py")
    expect(calc.locator("tr.add")).to_contain_text("return a + b")
    expect(page.get_by_role("heading", name="Evidence")).to_be_visible()
    expect(page.get_by_role("row", name="Tests after")).to_contain_text("pass")
    person.shoot("5-review")
    calc.locator("summary").click()  # collapses
    expect(calc.locator("table")).to_be_hidden()
    calc.locator("summary").press("Enter")  # and opens again from the keyboard
    expect(calc.locator("table")).to_be_visible()
    page.get_by_role("switch", name="Hide whitespace changes").click()
    expect(page.get_by_role("switch", name="Whitespace changes hidden — show them")).to_be_visible()

    page.get_by_role("button", name="Accept attempt 1").click()
    expect(page.locator("[data-state]")).to_have_text("accepted")
    expect(log).to_contain_text("accepted as")
    person.shoot("6-task-accepted")
    page.goto(served.url)
    expect(page.get_by_role("cell", name="accepted")).to_be_visible()
    row = page.get_by_role("row").filter(has_text="Make test_calc.py pass")
    expect(row.get_by_role("cell").nth(5)).to_have_text("600")  # 5 model calls of 100 in and 20 out
    expect(row.get_by_role("cell").nth(4)).to_have_text(re.compile(r"^\d+(\.\d)?s$"))  # how long it took
    person.shoot("7-tasks")

    branch = git(repo, "branch", "--list", "errand/*").strip().lstrip("* ")
    assert "return a + b" in git(repo, "show", f"{branch}:calc.py")
    assert person.errors == [], "\n".join(person.errors)


def test_see_a_tasks_memories_and_approve_a_proposal(serve: Callable[..., Served], repo: Path,
                                                     browser: playwright.Browser, artifacts: Path) -> None:
    served = serve("--no-engine")
    with served.client() as client:
        task = client.post("/api/tasks", json={"instruction": "Make test_calc.py pass", "repo": str(repo),
                                               "model": "openai:wire-model"}).json()
    with MemoryStore.open(served.database, embedder=None) as memories:
        project = project_key(repo)
        given = memories.add(project, "Run the tests with python3 test_calc.py", kind="command",
                             provenance=Provenance.task("t-earlier", 4, "test command"))
        proposed = memories.add(project, "add() takes numbers only, never strings", kind="convention",
                                status="proposed", confidence=0.5,
                                provenance=Provenance.task(task["id"], None, "proposed by the agent"))
        memories.record_use(task["id"], [given.id], "given")
        memories.record_use(task["id"], [proposed.id], "recalled")
    person = Person(browser, served.url, artifacts)
    page, expect = person.page, playwright.expect

    page.goto(f"{served.url}/tasks/{task['id']}")
    used = page.get_by_role("region", name="Memories used")
    expect(used).to_contain_text("Run the tests with python3 test_calc.py")
    expect(used).to_contain_text("task t-earlier event 4 (test command)")
    expect(used).to_contain_text("recalled")
    person.shoot("8-task-memories")
    used.get_by_role("link", name=f"Memory {given.id}").click()
    expect(page.get_by_role("heading", name=f"Memory {given.id}", exact=True)).to_be_visible()
    expect(page.locator(f"#memory-{given.id}")).to_contain_text("given to 1 task(s), recalled by 0")  # not "used 0×"
    person.shoot("9-memory-one")

    page.get_by_role("navigation", name="Main").get_by_role("link", name="Memory").click()
    expect(page.get_by_role("heading", name="Memory", exact=True)).to_be_visible()
    page.get_by_label("Status").select_option("proposed")
    page.get_by_role("button", name="Filter").click()
    card = page.locator(f"#memory-{proposed.id}")
    expect(card).to_contain_text("proposed")
    expect(card.get_by_role("link", name=f"task {task['id']}")).to_be_visible()  # where it came from
    expect(page.locator(f"#memory-{given.id}")).to_have_count(0)
    person.shoot("10-memory-proposed")
    card.get_by_role("button", name=f"Approve memory {proposed.id}").focus()
    page.keyboard.press("Enter")
    expect(page.get_by_text("No memories match these filters.")).to_be_visible()
    page.goto(f"{served.url}/memory")
    expect(page.locator(f"#memory-{proposed.id}")).to_contain_text("active")
    person.shoot("11-memory")
    assert person.errors == [], "\n".join(person.errors)
