"""The review surface as a team lives in it, in a real browser at 1280 and 390 px:
best-of-3 with a message sent mid-run, the attempts compared, a rejection with its
reason, a follow-up round, accepting with the next steps; a failed task that says why;
a question answered on a phone; an unknown task's page. Screenshots of every page are
written to the directory the test prints."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from components import needs
from engine.harness import FINISH, FIX, READ, TEST, git

from .agents import Agents
from .browsing import Person
from .conftest import Served
from .test_browser import ASK

pytestmark = [pytest.mark.slow, needs("chromium")]
playwright = pytest.importorskip("playwright.sync_api")
FIX_OTHER = ("edit_file", {"path": "calc.py", "old": "return a - b", "new": "return b + a"})
FIX_DOUBLE = ("edit_file", {"path": "calc.py", "old": "return x + x + 1", "new": "return 2 * x"})
MESSAGE = "Keep the function names as they are."


def start_task(person: Person, repo: Path, instruction: str, attempts: int, *, page: object = None) -> None:
    on = page or person.page
    on.goto(person.base)  # type: ignore[attr-defined]
    form = on.get_by_role("region", name="New task")  # type: ignore[attr-defined]
    form.get_by_label("Repository").fill(str(repo))
    form.get_by_label("Instruction").fill(instruction)
    form.get_by_label("Model").fill("openai:wire-model")
    form.get_by_label("Attempts").fill(str(attempts))
    form.get_by_role("button", name="Start task").click()


def figure(page: playwright.Page, term: str) -> playwright.Locator:
    return page.locator("#facts dl.figures div", has=page.locator("dt", has_text=term)).locator("dd")


def test_best_of_three_with_a_message_compared_rejected_followed_up_and_accepted(
        served: Served, agents: Agents, repo: Path, browser: playwright.Browser, artifacts: Path) -> None:
    agents.add([[READ], [FIX], [TEST], [FINISH]],  # whichever attempt starts first; held at its second step
               [[FIX], [FINISH]],  # the same diff as the first
               [[FIX_OTHER], [TEST], [FINISH]])  # another diff that passes too
    held = agents.gate(0, 1)
    person = Person(browser, served.url, artifacts)
    page, expect = person.page, playwright.expect
    start_task(person, repo, "Make test_calc.py pass", 3)
    log = page.get_by_role("list", name="Agent steps and commands")

    assert held.reached.wait(120), "the first attempt never asked for its second step"
    page.get_by_label("Message the agent").fill(MESSAGE)
    page.get_by_role("button", name="Send message").click()
    expect(log.locator(".ev-message_sent")).to_contain_text(MESSAGE, timeout=60_000)
    held.open()
    expect(log).to_contain_text("message delivered to the agent", timeout=60_000)
    review = page.get_by_role("link", name="Review the diff")
    expect(review).to_be_visible(timeout=120_000)
    expect(page.locator("[data-state]")).to_have_text("ready for review")
    told = [m for request in agents.seen[0] for m in request if m.get("role") == "user"]
    assert any(MESSAGE in str(m.get("content")) for m in told), "the message never reached the model"

    # The header adds up what the model server was sent: 9 agent steps of 100 in and 20 out, and the
    # call that distils memories from the finished task (counted in tokens, not in steps).
    expect(figure(page, "Steps")).to_have_text("9")
    expect(figure(page, "Tokens")).to_have_text("1.2k (1.0k in, 200 out)")
    rows = page.get_by_role("table").filter(has_text="against its budget").locator("tbody tr")
    expect(rows).to_have_count(3)
    expect(rows.nth(0)).to_contain_text(re.compile(r"\d of 100"))
    expect(log.locator("time").first).to_have_text(re.compile(r"^\d\d:\d\d:\d\d$"))  # local time, every line
    person.shoot("20-best-of-3-ready")

    page.get_by_label("Attempt").select_option("2")
    page.get_by_role("button", name="Show").click()
    expect(log.locator("li[data-attempt='2']").first).to_be_visible()
    for other in ("1", "3"):
        expect(log.locator(f"li[data-attempt='{other}']:visible")).to_have_count(0)
    person.shoot("21-log-one-attempt")

    review.click()
    expect(page.get_by_role("heading", name="Attempts, best first")).to_be_visible()
    expect(page.locator(".attempt .same")).to_have_count(1)  # one attempt repeats another's diff
    expect(page.locator(".attempt .same")).to_contain_text(re.compile(r"Same diff as attempt \d"))
    conversation = page.get_by_role("region", name="Conversation")
    expect(conversation).to_contain_text(MESSAGE)
    person.shoot("22-review-best-of-3")
    page.get_by_role("link", name="Compare them side by side").click()
    expect(page.get_by_role("heading", name="How they rank")).to_be_visible()
    expect(page.get_by_role("row", name=re.compile("^calc.py"))).to_be_visible()
    expect(page.locator('tbody.compare-file[data-path="calc.py"]')).to_contain_text("return b + a")
    person.shoot("23-compare")
    page.go_back()

    page.get_by_label("Reason for rejecting").fill("Both fixes work, but the tests should cover double() too.")
    page.get_by_role("button", name="Reject").click()
    expect(page.locator("[data-state]")).to_have_text("rejected")
    expect(page.get_by_role("region", name="Rejected")).to_contain_text("should cover double() too")
    expect(conversation).to_contain_text("You rejected it")
    person.shoot("24-review-rejected")

    agents.add(*([[FIX_DOUBLE], [FINISH]] for _ in range(3)))
    page.get_by_label("Follow-up instruction").fill("Fix double() as well.")
    page.get_by_role("button", name="Send follow-up").click()
    expect(page.get_by_role("heading", name="Make test_calc.py pass")).to_be_visible(timeout=60_000)  # a loaded server
    expect(log.locator(".ev-round_started").nth(1)).to_contain_text("round 2 started", timeout=60_000)
    expect(review).to_be_visible(timeout=120_000)
    review.click()
    expect(page.locator("details.file", has_text="calc.py").locator("tr.add", has_text="return 2 * x")).to_be_visible()
    page.get_by_role("button", name=re.compile(r"^Accept attempt \d$")).click()
    expect(page.locator("[data-state]")).to_have_text("accepted")
    steps = page.locator(".next")
    branch = git(repo, "branch", "--list", "errand/*").strip().lstrip("* ")
    expect(steps).to_contain_text(f"git switch {branch}")
    expect(steps).to_contain_text(f"git push -u origin {branch}")
    expect(page.locator("#facts, #panel, main > p").get_by_text("accepted", exact=True)).to_have_count(1)
    person.shoot("25-accepted-next-steps")
    assert "return 2 * x" in git(repo, "show", f"{branch}:calc.py")
    page.goto(f"{served.url}{page.url.split(served.url, 1)[1].split('/review')[0]}")
    expect(log.locator(".ev-message_delivered[data-round='2']")).to_have_count(0)  # round 1's message stays there
    expect(page.locator("#panel .rejection")).to_have_count(0)  # the rejection was answered by the follow-up
    options = page.get_by_label("Attempt").locator("option")
    expect(options).to_have_text(["all", "round 1 · #1", "round 1 · #2", "round 1 · #3", "round 2 · #4",
                                  "round 2 · #5", "round 2 · #6"])
    assert person.errors == [], "\n".join(person.errors)


def test_a_failed_task_says_why_offers_no_diff_and_is_retried(served: Served, agents: Agents, repo: Path,
                                                    browser: playwright.Browser, artifacts: Path) -> None:
    agents.add([[TEST], [("finish", {"summary": "the tests fail and I could not see why", "assumptions": []})]])
    person = Person(browser, served.url, artifacts)
    page, expect = person.page, playwright.expect
    start_task(person, repo, "Make test_calc.py pass", 1)
    expect(page.locator("[data-state]")).to_have_text("failed", timeout=120_000)
    why = page.locator(".cause")
    expect(why).to_contain_text("no attempt changed anything")
    expect(why.locator("code")).to_have_text("python3 test_calc.py")
    expect(why).to_contain_text("exit 1")
    expect(why.locator("pre")).to_contain_text("AssertionError: add(2, 3) gave -1")  # the cause, not buried
    expect(page.get_by_role("link", name="Review the diff")).to_have_count(0)
    person.shoot("26-failed-why")

    agents.add([[FIX], [TEST], [FINISH]])
    page.get_by_role("button", name="Retry").click()
    log = page.get_by_role("list", name="Agent steps and commands")
    expect(log.locator(".ev-retried")).to_contain_text("retried after it was failed: round 2 starts")
    expect(page.get_by_role("link", name="Review the diff")).to_be_visible(timeout=120_000)
    expect(page.locator("[data-state]")).to_have_text("ready for review")
    expect(page.locator(".cause")).to_have_count(0)  # the failure was the last round's
    expect(log.locator(".ev-round_started")).to_have_count(2)
    person.shoot("27-retried")
    assert person.errors == [], "\n".join(person.errors)


def _boxes(*locators: playwright.Locator) -> list[dict[str, float]]:
    """Each element's box, read again while one is between two drawings (the live log is drawn
    anew as events arrive, and an element being replaced has no box for that moment)."""
    for _ in range(100):
        boxes = [locator.bounding_box() for locator in locators]
        if all(box is not None for box in boxes):
            return [dict(box) for box in boxes if box is not None]
        playwright.expect(locators[0]).to_be_visible()
    raise AssertionError(f"no box for {[str(locator) for locator in locators]}")


def test_a_question_answered_on_a_phone(served: Served, agents: Agents, repo: Path,
                                        browser: playwright.Browser, artifacts: Path) -> None:
    agents.add([[READ], [ASK], [FIX], [TEST], [FINISH]])
    person = Person(browser, served.url, artifacts)
    phone, expect = person.narrow, playwright.expect
    phone.goto(served.url)
    new = phone.get_by_role("region", name="New task")
    listing = phone.get_by_role("heading", name="Tasks", exact=True)
    assert new.bounding_box()["y"] < listing.bounding_box()["y"], "the new-task form is below the list on a phone"
    start_task(person, repo, "Make test_calc.py pass", 1, page=phone)
    asks = phone.get_by_text("The agent asks: Should add() accept strings too?")
    expect(asks).to_be_visible(timeout=60_000)
    log = phone.get_by_role("list", name="Agent steps and commands")
    asked_at, log_at = _boxes(asks, log)
    assert asked_at["y"] < log_at["y"], "the answer form is below the log on a phone"
    expect(log.get_by_text("Should add() accept strings too?")).to_have_count(1)  # asked once in the log
    width = phone.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, f"the task page scrolls sideways at 390 px ({width} px)"
    phone.screenshot(path=str(artifacts / "28-phone-question-390.png"), full_page=True)
    phone.get_by_label("Your answer").fill("No, numbers only.")
    phone.get_by_role("button", name="Send answer").click()
    expect(phone.get_by_role("link", name="Review the diff")).to_be_visible(timeout=120_000)
    phone.screenshot(path=str(artifacts / "29-phone-answered-390.png"), full_page=True)

    phone.goto(f"{served.url}/tasks/t-nosuchtask")
    expect(phone.get_by_role("heading", name="Not Found")).to_be_visible()
    expect(phone.get_by_text("t-nosuchtask")).to_be_visible()
    expect(phone.get_by_role("link", name="Back to the tasks")).to_be_visible()
    phone.screenshot(path=str(artifacts / "30-not-found-390.png"), full_page=True)
    assert person.errors == [] or all("404" in e for e in person.errors), "\n".join(person.errors)


def test_a_panel_refresh_that_answers_after_the_page_was_left_changes_nothing(
        served: Served, agents: Agents, repo: Path, browser: playwright.Browser, artifacts: Path) -> None:
    # The task page redraws its panel, header and memories as the task moves; a redraw still on its
    # way when the person followed a link landed on the next page, where its header and memories had
    # no place (htmx:oobErrorNoTarget, seen in CI on the way to the review page).
    agents.add([[READ], [FIX], [TEST], [FINISH]])
    held = agents.gate(0, 1)
    person = Person(browser, served.url, artifacts)
    page, expect = person.page, playwright.expect
    start_task(person, repo, "Make test_calc.py pass", 1)
    assert held.reached.wait(120), "the attempt never asked for its second step"
    expect(page.locator("[data-state]")).to_have_text("running")
    # Every redraw from here on is held on its way. The one asked for by the new lines of the log, or
    # one the page had already timed before the route was in place: either is in flight when the
    # person leaves. (Waiting for the request event instead missed a redraw that left between the
    # route and the wait: held by the route, it kept the page's only refresh in flight for good.)
    redraws: list[playwright.Route] = []
    page.route(re.compile(r"/tasks/[^/]+/panel$"), lambda route: redraws.append(route))
    held.open()  # new lines in the log: the page asks for a redraw
    for _ in range(600):  # route handlers run while the page is driven, hence the short waits
        if redraws:
            break
        page.wait_for_timeout(100)
    assert redraws, "the page never asked for a redraw after the attempt went on"
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Tasks").click()
    expect(page.get_by_role("region", name="New task")).to_be_visible()
    page.evaluate("""() => { window.redrawn = false; document.addEventListener("htmx:afterRequest",
        event => { if (event.detail.pathInfo.requestPath.endsWith("/panel")) window.redrawn = true; }); }""")
    for redraw in redraws:
        redraw.continue_()
    for _ in range(600):  # the page's CSP allows no eval, so no wait_for_function: asked from outside
        if page.evaluate("() => window.redrawn"):
            break
        page.wait_for_timeout(100)
    assert page.evaluate("() => window.redrawn"), "the held redraw never came back"
    expect(page.locator("#facts, #panel, #memories")).to_have_count(0)
    assert person.errors == [], "\n".join(person.errors)
