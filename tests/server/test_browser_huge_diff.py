"""A huge diff on the review page, in a real browser: 5,000 added files, a 300,000-line file, a
dozen mid-sized ones and a deleted one (what a red team's run produced: 63.7 MB of HTML). The page
lists a bounded number of files and draws a bounded number of lines, saying so; closed files and
those past the budget load on demand, one at a time and bounded too; a deleted file offers no
"more below"."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from components import needs
from engine.harness import git, make_repo
from errand.server.diffview import FILE_LINES, PAGE_FILES, PAGE_LINES
from errand.tasks.store.tasks import TaskStore

from .browsing import Person
from .conftest import Served, start_server

pytestmark = [pytest.mark.slow, needs("chromium")]
playwright = pytest.importorskip("playwright.sync_api")
LOADED = 120_000  # ms: a page or a file on a saturated machine (a check, not a speed claim)
SMALL_FILES = 5000
HUGE_LINES = 300_000
PAGE_BYTES = 2_000_000  # the HTML a page of this diff may weigh: bounded, whatever the diff


@pytest.fixture
def huge(tmp_path: Path) -> Iterator[tuple[Served, str]]:
    """A server (no engine) and a task ready for review whose one attempt is the huge diff, made by git."""
    repo = make_repo(tmp_path / "project", files={"NOTES.md": "Old notes nobody reads.\n" * 3})
    base = git(repo, "rev-parse", "HEAD").strip()
    (repo / "NOTES.md").unlink()
    (repo / "a_huge.txt").write_text("".join(f"row {n}\n" for n in range(HUGE_LINES)))
    for n in range(12):  # 350 lines each: open (under the large mark), but together past the page's budget
        (repo / f"b_mid_{n:02}.txt").write_text("".join(f"mid {n} line {m}\n" for m in range(350)))
    (repo / "many").mkdir()
    for n in range(SMALL_FILES):
        (repo / "many" / f"f{n:05}.txt").write_text(f"file {n}\n")
    git(repo, "add", "-A")
    patch = git(repo, "diff", "--cached", base)
    served = start_server(tmp_path, "--no-engine", env={"ERRAND_HOME": str(tmp_path / "home")})
    store = TaskStore.open(served.database)
    task = store.create_reviewable(title="Add many files", instruction="Add many files", repo=str(repo),
                                   base_ref="main", base_commit=base, worker="test",
                                   result={"status": "finished", "detail": None, "rank": 1, "patch": patch})
    yield served, task.id
    served.stop()


def test_a_huge_diff_draws_a_bounded_page_and_loads_files_on_demand(huge: tuple[Served, str], artifacts: Path,
                                                                     browser: playwright.Browser) -> None:
    served, task_id = huge
    total = SMALL_FILES + 12 + 2
    review = f"{served.url}/tasks/{task_id}/review"
    html = httpx.get(review, timeout=600)
    assert html.status_code == 200, html.text[:2000]
    assert len(html.content) < PAGE_BYTES, f"the review page weighs {len(html.content):,} bytes"

    person = Person(browser, served.url, artifacts)
    page, expect = person.page, playwright.expect
    page.goto(review, timeout=LOADED)
    notice = page.get_by_role("note", name="A large diff")
    expect(notice).to_contain_text(f"This diff changes {total:,} files: this page lists files 1–{PAGE_FILES}")
    expect(notice).to_contain_text(f"The page draws at most {PAGE_LINES:,} lines: ")
    expect(page.locator("details.file")).to_have_count(PAGE_FILES)
    expect(page.locator(".tree-box > summary")).to_have_text(f"Files changed ({total})")

    # The 300,000-line file is closed and not drawn; opened, it loads, drawn up to its bound, saying so.
    big = page.locator('details.file[data-path="a_huge.txt"]')
    expect(big.locator(".why-closed")).to_contain_text(f"large: {HUGE_LINES} changed lines")
    expect(big.locator("table")).to_have_count(0)
    big.locator("summary .path").click()
    expect(big.locator("table.unified tr.add")).to_have_count(FILE_LINES - 1, timeout=LOADED)  # and its hunk's row
    expect(big.locator(".cut-notice")).to_contain_text(f"{HUGE_LINES - FILE_LINES + 1:,} more line(s) of this file")
    expect(big.locator("tr.add").first).to_contain_text("row 0")

    # The mid-sized files are drawn until the page's budget is spent; the rest say so and load when opened.
    drawn = page.locator('details.file[data-path^="b_mid_"][open] table.unified')
    expect(drawn).to_have_count(PAGE_LINES // 352)
    later = page.locator('details.file[data-path="b_mid_11.txt"]')
    expect(later.locator(".why-closed")).to_contain_text("past the page's line budget")
    later.locator("summary .path").click()
    expect(later.locator("table.unified tr.add")).to_have_count(350, timeout=LOADED)
    expect(later.locator("tr.add").last).to_contain_text("mid 11 line 349")

    # A deleted file shows the whole of itself: nothing more above or below.
    notes = page.locator('details.file[data-path="NOTES.md"]')
    notes.locator("summary .path").click()
    expect(notes.locator("table.unified tr.del")).to_have_count(3, timeout=LOADED)
    expect(notes.get_by_role("button", name="Show more lines below (NOTES.md)")).to_have_count(0)
    expect(notes.locator("button.expand")).to_have_count(0)

    # The next page lists the next files.
    next_files = page.locator('.budget-notice a[rel="next"]')  # by CSS: roles over 5,000 drawn rows are slow to compute
    expect(next_files).to_have_text("Next files →")
    next_files.click()
    expect(page.locator(".budget-notice")).to_contain_text(
        f"this page lists files {PAGE_FILES + 1:,}–{2 * PAGE_FILES:,}", timeout=LOADED)
    expect(page.locator("details.file").first).to_have_attribute("id", f"file-{PAGE_FILES + 1}")

    # One file at a time, and only a file the diff has.
    with served.client() as client:
        missing = client.get(f"/tasks/{task_id}/review/file", params={"number": total + 1})
        assert missing.status_code == 422, missing.text[:500]
    assert person.errors == [], "\n".join(person.errors)
