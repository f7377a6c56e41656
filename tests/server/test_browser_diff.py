"""The review page read as a pull request's "Files changed", in a real browser at 1280 and
390 px, on a best-of-3 task whose attempts touch a real-looking project: a file tree with
counts, unified and side by side (remembered), changed words marked, more of a file shown
around a hunk, files marked viewed (remembered), keys, deleted / generated / large files
closed, comments on lines sent as one follow-up; and the attempts compared in columns with
the ranking's tie-break in words.

Run with ``ERRAND_DOC_SCREENSHOTS=1`` to write the pages' screenshots into docs/screenshots/."""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from components import needs
from engine.harness import FINISH, FIX, TEST, make_repo
from polling import settled

from .agents import Agents
from .browsing import NARROW, WIDE, Person
from .conftest import Served, wait_state

pytestmark = [pytest.mark.slow, needs("chromium")]
playwright = pytest.importorskip("playwright.sync_api")
LOADED = 60_000  # ms: a request to a server on a saturated machine (a check, not a speed claim)
DOCS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"

MODELS = "".join(f"def value_{n}(value):\n    return value * {n}\n\n\n" for n in range(1, 16))  # 60 lines
LOCK = '{\n  "name": "demo",\n  "lockfileVersion": 3,\n  "packages": {\n    "left-pad": "1.3.0"\n  }\n}\n'
PROJECT = {"pyproject.toml": '[project]\nname = "demo"\nversion = "0.1.0"\n\n[build-system]\nrequires = ["hatchling"]\n'
                             'build-backend = "hatchling.build"\n',
           "src/demo/models.py": MODELS, "package-lock.json": LOCK,
           "NOTES.md": "Old notes nobody reads.\n" * 3}
EDIT_MODELS = ("edit_file", {"path": "src/demo/models.py", "old": "    return value * 8\n",
                             "new": "    return value * 8 + offset\n"})
NEW_LOCK = ("write_file", {"path": "package-lock.json", "content": LOCK.replace("1.3.0", "1.3.1")})
DELETE_NOTES = ("shell", {"command": "rm NOTES.md"})
BIG = ("write_file", {"path": "data.csv", "content": "".join(f"{n},{n * n}\n" for n in range(450))})
WORK = [FIX, EDIT_MODELS, NEW_LOCK, DELETE_NOTES, BIG]
EXTRA = ("edit_file", {"path": "calc.py", "old": "return x + x + 1", "new": "return 2 * x"})


def shoot(page: playwright.Page, artifacts: Path, name: str) -> None:
    """A full-page screenshot into the artifacts (and docs/screenshots/ when asked); at 390 px
    the page must not scroll sideways."""
    path = artifacts / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    if os.environ.get("ERRAND_DOC_SCREENSHOTS"):
        DOCS.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, DOCS / path.name)
    width = page.evaluate("document.documentElement.scrollWidth")
    viewport = page.viewport_size or WIDE
    assert width <= viewport["width"], f"{name} scrolls sideways ({width} px wide)"


def numbered(file: playwright.Locator, side: str, line: int) -> playwright.Locator:
    """The unified row of ``file`` that shows ``line`` of ``side``."""
    return file.locator("table.unified tr", has=file.page.locator(f'td.num[data-side="{side}"][data-line="{line}"]'))


def file_card(page: playwright.Page, path: str) -> playwright.Locator:
    return page.locator(f'details.file[data-path="{path}"]')


def test_files_changed_like_a_pull_request(served: Served, agents: Agents, tmp_path: Path,
                                           browser: playwright.Browser, artifacts: Path) -> None:
    repo = make_repo(tmp_path / "project", files=PROJECT)
    agents.add([WORK, [TEST], [FINISH]], [WORK, [TEST], [FINISH]], [[*WORK, EXTRA], [TEST], [FINISH]])
    with served.client() as client:
        task = client.post("/api/tasks", json={"instruction": "Fix add() and tidy up", "repo": str(repo),
                                               "model": "openai:wire-model", "attempts": 3}).json()
        wait_state(client, task["id"], "ready_for_review", seconds=600)
    person = Person(browser, served.url, artifacts)
    page, phone, expect = person.page, person.narrow, playwright.expect
    review = f"{served.url}/tasks/{task['id']}/review"
    page.goto(review)

    # The tree: every file with its counts, in the diff's order, directories named once.
    tree = page.get_by_role("navigation", name="Changed files")
    expect(tree.locator(".tree-file")).to_have_count(5)
    expect(tree.locator(".tree-dir")).to_have_text(["src/", "demo/"])
    expect(tree.locator(".tree-file", has_text="calc.py")).to_contain_text("+1 −1")
    expect(tree.locator(".tree-file", has_text="data.csv")).to_contain_text("+450 −0")

    # Deleted, generated and large files start closed, saying why; one click opens one.
    for path, why in (("NOTES.md", "deleted"), ("package-lock.json", "generated: lockfile"),
                      ("data.csv", "large: 450 changed lines")):
        expect(file_card(page, path)).not_to_have_attribute("open", "")
        expect(file_card(page, path).locator(".why-closed")).to_contain_text(why)
    expect(file_card(page, "calc.py")).to_have_attribute("open", "")
    file_card(page, "NOTES.md").locator("summary .path").click()
    expect(file_card(page, "NOTES.md")).to_have_attribute("open", "")
    expect(file_card(page, "NOTES.md").locator("tr.del")).to_have_count(3)

    # Words: only the operator that changed is marked, on both sides.
    calc = file_card(page, "calc.py")
    expect(calc.locator("table.unified tr.del .w")).to_have_text(["-"])
    expect(calc.locator("table.unified tr.add .w")).to_have_text(["+"])
    models = file_card(page, "src/demo/models.py")
    expect(models.locator("table.unified tr.add .w")).to_have_text([" ", "+", " ", "offset"])

    # More of the file: the hunk starts at line 27; "more above" adds the base's lines 7-26.
    expect(models.locator("tr.hunk")).to_have_attribute("data-old", "27")
    models.get_by_role("button", name="Show more lines above (src/demo/models.py)").click()
    expect(models.locator("table.unified tr.expanded")).to_have_count(20, timeout=LOADED)
    expect(models.locator('table.unified td.num[data-side="old"][data-line="7"]')).to_have_count(1)
    expect(numbered(models, "old", 10)).to_contain_text("return value * 3")
    models.get_by_role("button", name="Show more lines above (src/demo/models.py)").click()
    expect(models.locator("table.unified tr.expanded")).to_have_count(26, timeout=LOADED)  # 1-6: the gap closed
    expect(models.get_by_role("button", name="Show more lines above (src/demo/models.py)")).to_have_count(0)
    below = models.get_by_role("button", name="Show more lines below (src/demo/models.py)")
    below.click()
    expect(models.locator('td.num[data-side="new"][data-line="53"]')).to_have_count(1, timeout=LOADED)
    below.click()
    expect(below).to_have_count(0, timeout=LOADED)  # the base's end was reached: nothing more below
    expect(numbered(models, "new", 58)).to_contain_text("return value * 15")
    expect(models.locator("table.unified tr.expanded").last.locator("td.num").first).to_have_text("60")

    # The lines come from the base, and only of a file the attempt changed, a bounded stretch at a time.
    with served.client() as client:
        context = f"/tasks/{task['id']}/context"
        outside = client.get(context, params={"path": "test_calc.py", "start": 1, "end": 3})
        assert outside.status_code == 422 and outside.json()["code"] == "not_in_diff"
        added = client.get(context, params={"path": "data.csv", "start": 1, "end": 3})
        assert added.status_code == 422 and added.json()["code"] == "not_in_diff"  # no base to show
        too_many = client.get(context, params={"path": "calc.py", "start": 1, "end": 1000})
        assert too_many.status_code == 422 and too_many.json()["code"] == "bad_range"
        lines = client.get(context, params={"path": "NOTES.md", "start": 2, "end": 9}).json()
        assert lines == {"path": "NOTES.md", "total": 3, "lines": [{"old": 2, "html": "Old notes nobody reads."},
                                                                   {"old": 3, "html": "Old notes nobody reads."}]}

    # Comments: a range on the new side, a line on the old side; kept across a reload.
    models.locator('table.unified td.num[data-side="new"][data-line="28"]').click()
    models.locator('table.unified td.num[data-side="new"][data-line="30"]').click(modifiers=["Shift"])
    expect(models.locator("td.num.sel")).to_have_count(3)
    form = models.locator("tr.comment-form")
    expect(form.get_by_label("Comment on src/demo/models.py lines 28–30 (new)")).to_be_visible()
    form.get_by_role("textbox").fill("Where does `offset` come from?")
    form.get_by_role("button", name="Add comment").click()
    expect(models.locator("tr.comment")).to_contain_text("Where does `offset` come from?")
    calc.locator('table.unified td.num[data-side="old"][data-line="2"]').click()
    calc.locator("tr.comment-form").get_by_role("textbox").fill("Keep a note of why it subtracted.")
    calc.locator("tr.comment-form").get_by_role("button", name="Add comment").click()
    panel = page.get_by_role("region", name="Your comments")
    expect(panel.locator("li")).to_have_count(2)

    # Side by side: four columns, the pair on one row, the comment still under its line.
    page.get_by_role("button", name="Side by side").click()
    expect(calc.locator("table.split")).to_be_visible()
    expect(calc.locator("table.unified")).to_be_hidden()
    pair = calc.locator("table.split tr", has=page.locator("td.del"))
    expect(pair.locator("td.del.text")).to_contain_text("return a - b")
    expect(pair.locator("td.add.text")).to_contain_text("return a + b")
    expect(models.locator("table.split tr.comment")).to_have_count(1)
    page.reload()
    expect(calc.locator("table.split")).to_be_visible()  # remembered
    expect(page.get_by_role("button", name="Side by side")).to_have_attribute("aria-pressed", "true")
    expect(page.get_by_role("region", name="Your comments").locator("li")).to_have_count(2)  # kept
    page.evaluate("window.scrollTo(0, 0)")
    shoot(page, artifacts, "review-split-1280")
    phone.goto(review)  # a page of its own browser context: its own storage, so its own choice
    phone.get_by_role("button", name="Side by side").click()
    expect(file_card(phone, "calc.py").locator("table.split")).to_be_visible()
    shoot(phone, artifacts, "review-split-390")

    # Viewed: the file closes, the tree ticks it, and a reload keeps it so.
    calc.get_by_label("Viewed").check()
    expect(calc).not_to_have_attribute("open", "")
    expect(tree.locator(".tree-file.viewed")).to_have_count(1)
    page.get_by_role("button", name="Unified").click()
    page.reload()
    expect(calc).not_to_have_attribute("open", "")
    expect(calc.get_by_label("Viewed")).to_be_checked()
    expect(page.locator(".tree-box > summary")).to_have_text("Files changed (5), 1 viewed")

    # Keys: j / k move between files, v marks one viewed, n moves to a hunk, ? shows the keys.
    page.evaluate("window.scrollTo(0, 0)")
    page.keyboard.press("j")
    expect(page.locator("details.file.current")).to_have_attribute("data-path", "NOTES.md")
    page.keyboard.press("j")
    page.keyboard.press("j")
    page.keyboard.press("k")
    expect(page.locator("details.file.current")).to_have_attribute("data-path", "calc.py")
    page.keyboard.press("j")
    expect(page.locator("details.file.current")).to_have_attribute("data-path", "data.csv")
    page.keyboard.press("v")
    expect(file_card(page, "data.csv")).to_have_class(re.compile(r"\bviewed\b"))
    expect(tree.locator(".tree-file.viewed")).to_have_count(2)
    page.evaluate("window.scrollTo(0, 0)")
    hunk_top = "document.querySelector('details.file[open] table.unified tr.hunk').getBoundingClientRect().top"
    before = page.evaluate(hunk_top)
    page.keyboard.press("n")
    after = page.evaluate(hunk_top)
    at_bottom = page.evaluate("window.innerHeight + window.scrollY >= document.documentElement.scrollHeight - 1")
    assert before > 4 and (abs(after) < 2 or (after < before and at_bottom)), (before, after)
    page.keyboard.press("?")
    expect(page.get_by_role("dialog", name="Keyboard shortcuts")).to_be_visible()
    page.keyboard.press("Escape")
    expect(page.get_by_role("dialog", name="Keyboard shortcuts")).to_be_hidden()

    page.evaluate("window.scrollTo(0, 0)")
    shoot(page, artifacts, "review-unified-1280")
    phone.get_by_role("button", name="Unified").click()
    expect(file_card(phone, "calc.py").locator("table.unified")).to_be_visible()
    shoot(phone, artifacts, "review-unified-390")

    # The attempts in columns, with the tie between the two equal ones broken in words.
    page.goto(f"{served.url}/tasks/{task['id']}/compare")
    expect(page.locator("table.side-by-side > thead th")).to_have_count(3)
    expect(page.locator(".ranking-rule")).to_contain_text(
        "attempts equal on all four are placed by attempt number, the lower first")
    ranked = client_attempts(served, task["id"])
    first, second = sorted(n for n, (_, extra) in ranked.items() if not extra)
    expect(page.locator("p.tie")).to_have_text(
        f"Attempts {first} and {second} are equal on every measure: attempt {first} is placed first because its "
        "number is lower.")
    calc_row = page.locator('tbody.compare-file[data-path="calc.py"]')
    expect(calc_row.locator("td.cell")).to_have_count(3)  # the third attempt also fixed double()
    expect(calc_row.locator("td.cell").nth(2)).to_contain_text("return 2 * x")
    expect(calc_row.locator("td.cell").nth(0)).not_to_contain_text("return 2 * x")
    expect(page.locator('tbody.compare-file[data-path="data.csv"] details.closed-change')).to_contain_text(
        "large: 450 changed lines, closed")
    expect(page.locator('tbody.compare-file[data-path="data.csv"] details.closed-change')).not_to_have_attribute(
        "open", "")
    same = page.locator('tbody.compare-file[data-path="src/demo/models.py"]')
    expect(same).to_contain_text("the same in every attempt")
    expect(same.locator("td.cell")).to_have_count(1)
    boxes = [calc_row.locator("td.cell").nth(n).bounding_box() for n in range(3)]
    assert all(box is not None for box in boxes)
    tops = {round(box["y"]) for box in boxes if box is not None}
    assert len(tops) == 1, f"the attempts' cells for calc.py are not on one row: {boxes}"
    shoot(page, artifacts, "compare-1280")
    phone.goto(page.url)
    expect(phone.locator("tbody.compare-file").first).to_be_visible()
    shoot(phone, artifacts, "compare-390")

    # Send: one request to the follow-up endpoint carrying every comment with its file, side and lines.
    page.goto(review)
    panel = page.get_by_role("region", name="Your comments")
    panel.get_by_label("Overall instruction (optional)").fill("Please answer both comments.")
    agents.add(*([[FINISH]] for _ in range(3)))
    with page.expect_request(lambda r: r.method == "POST" and r.url.endswith("/followup")) as sent:
        panel.get_by_role("button", name="Send as follow-up").click()
    request = sent.value
    assert request.url == f"{served.url}/api/tasks/{task['id']}/followup"
    assert request.headers["content-type"] == "application/json"
    assert re.fullmatch(r"[0-9a-f]{64}", request.headers["x-csrf-token"])
    best = min(ranked, key=lambda number: ranked[number][0])
    assert request.post_data_json == {"text": "Please answer both comments.", "attempt": best, "comments": [
        {"path": "src/demo/models.py", "side": "new", "start_line": 28, "end_line": 30,
         "body": "Where does `offset` come from?"},
        {"path": "calc.py", "side": "old", "start_line": 2, "end_line": 2,
         "body": "Keep a note of why it subtracted."}]}
    response = request.response()
    assert response is not None and response.ok, response and response.text()
    expect(page).to_have_url(f"{served.url}/tasks/{task['id']}", timeout=LOADED)  # sent: the task page, its new round
    assert page.evaluate("Object.keys(localStorage).filter(k => k.startsWith('errand.comments.'))") == []
    if takes_comments(served):  # the API that anchors comments: the next round's model request carries each one
        assert wait_for(lambda: any("Where does `offset` come from?" in json.dumps(requests)
                                    and "Keep a note of why it subtracted." in json.dumps(requests)
                                    for conversation, requests in dict(agents.seen).items() if conversation >= 3))
    assert person.errors == [], "\n".join(person.errors)
    assert NARROW["width"] == 390


def takes_comments(served: Served) -> bool:
    """Whether this server's follow-up takes line comments (its schema says so): until that API lands,
    an unknown field is ignored and only the request the page sends can be checked."""
    with served.client() as client:
        return "CommentIn" in client.get("/openapi.json").json().get("components", {}).get("schemas", {})


def wait_for(condition: Callable[[], bool], seconds: float = 120) -> bool:
    return bool(settled(condition, seconds))


def client_attempts(served: Served, task_id: str) -> dict[int, tuple[int, bool]]:
    """Each attempt's number: its place, and whether its diff carries the extra change (the API's word)."""
    with served.client() as client:
        found = {}
        for attempt in client.get(f"/api/tasks/{task_id}/attempts").json():
            number = int(attempt["run"]["attempt"])
            patch = client.get(f"/api/tasks/{task_id}/diff", params={"attempt": number}).text
            found[number] = (int(attempt["rank"]), "return 2 * x" in patch)
        return found
