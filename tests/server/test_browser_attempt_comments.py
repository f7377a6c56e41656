"""Comments on the lines of one attempt of a best-of-2 round, in a real browser: they are kept
with that attempt (another attempt's page does not show them), sent with its number, checked
against and quoted from its diff — not the best attempt's — and the next round's model request
names it. Then the same through the HTTP API, for an attempt of the new round, and the attempts
a follow-up cannot be about refused with nothing changed."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import httpx
import pytest

import forkserver
from components import needs
from engine.harness import FINISH, FIX, TEST, make_repo

from .agents import Agents
from .browsing import Person
from .conftest import Served, wait_state
from .settling import unchanged

pytestmark = [pytest.mark.slow, needs("chromium")]
playwright = pytest.importorskip("playwright.sync_api")
LOADED = 60_000  # ms: a request to a server on a saturated machine (a check, not a speed claim)

DOC = '    """Attempt two documents add()."""\n'
DOCUMENT = ("edit_file", {"path": "calc.py", "old": "def add(a, b):\n", "new": "def add(a, b):\n" + DOC})
SHORT = [[FIX], [TEST], [FINISH]]  # the smaller diff: ranked first
LONGER = [[FIX, DOCUMENT], [TEST], [FINISH]]  # one line more: ranked second


def flat(text: str) -> str:
    return "\n".join(line.strip() for line in text.split("\n"))


def first_requests(agents: Agents, conversations: range, seconds: float = 300) -> list[str]:
    """What the first request of each of ``conversations`` told the model (unindented)."""
    deadline = time.monotonic() + seconds
    while not all(agents.seen.get(n) for n in conversations):
        assert time.monotonic() < deadline, f"conversations {conversations} never all started: {list(agents.seen)}"
        time.sleep(0.1)
    return [flat("\n".join(str(m.get("content") or "") for m in agents.seen[n][0])) for n in conversations]


def ranked(client: httpx.Client, task_id: str) -> list[int]:
    """The last round's attempt numbers, best first (the API's word)."""
    return [int(a["run"]["attempt"]) for a in sorted(client.get(f"/api/tasks/{task_id}/attempts").json(),
                                                     key=lambda a: int(a["rank"]))]


def cli(served: Served, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ERRAND_SERVER": served.url}
    return forkserver.run([*args], timeout=120, env=env)


def test_a_comment_on_the_second_attempt_is_anchored_to_its_lines(served: Served, agents: Agents, tmp_path: Path,
                                                                   browser: playwright.Browser,
                                                                   artifacts: Path) -> None:
    repo = make_repo(tmp_path / "project")
    agents.add(SHORT, LONGER)
    with served.client() as client:
        task_id = client.post("/api/tasks", json={"instruction": "Fix add()", "repo": str(repo),
                                                  "model": "openai:wire-model", "attempts": 2}).json()["id"]
        wait_state(client, task_id, "ready_for_review", seconds=600)
        best, second = ranked(client, task_id)
        assert DOC in client.get(f"/api/tasks/{task_id}/diff", params={"attempt": second}).text
    person = Person(browser, served.url, artifacts)
    page, expect = person.page, playwright.expect
    review = f"{served.url}/tasks/{task_id}/review"

    # A comment on line 2 of the second attempt's calc.py: its docstring (the best attempt's line 2 is the fix).
    page.goto(f"{review}?attempt={second}")
    calc = page.locator('details.file[data-path="calc.py"]')
    calc.locator('table.unified td.num[data-side="new"][data-line="2"]').click()
    form = calc.locator("tr.comment-form")
    form.get_by_role("textbox").fill("Say what it returns, too.")
    form.get_by_role("button", name="Add comment").click()
    panel = page.get_by_role("region", name="Your comments")
    expect(panel.locator("li")).to_have_count(1)

    # Kept with that attempt: the best attempt's page has none, and the second's still has it.
    page.goto(f"{review}?attempt={best}")
    expect(page.get_by_role("region", name="Your comments")).to_contain_text("No comments yet.")
    expect(page.locator("tr.comment")).to_have_count(0)
    page.goto(f"{review}?attempt={second}")
    expect(page.get_by_role("region", name="Your comments").locator("li")).to_have_count(1)
    expect(calc.locator("tr.comment")).to_contain_text("Say what it returns, too.")

    agents.add([[FINISH]], [[FINISH]])
    with page.expect_request(lambda r: r.method == "POST" and r.url.endswith("/followup")) as sent:
        page.get_by_role("region", name="Your comments").get_by_role("button", name="Send as follow-up").click()
    assert sent.value.post_data_json["attempt"] == second
    expect(page).to_have_url(f"{served.url}/tasks/{task_id}", timeout=LOADED)
    left = page.evaluate("Object.keys(localStorage).filter(k => k.startsWith('errand.comments.'))")
    assert left == [], left  # sent: the round's unsent comments are gone with it

    # The next round's model sees attempt 2's line, quoted as attempt 2 has it, and which attempt it was.
    for request in first_requests(agents, range(2, 4)):
        assert flat(f"1. calc.py, line 2 (new):\n   ```\n       2 + {DOC.rstrip()}\n   ```\n"
                    "   Say what it returns, too.") in request, request
        assert f"commented on lines of the diff of attempt {second}" in request
        assert f"Your working copy holds the work of attempt {best}, the best-ranked, not of attempt {second}" \
            in request
    assert person.errors == [], "\n".join(person.errors)

    with served.client() as client:
        wait_state(client, task_id, "ready_for_review", seconds=600)
        events = client.get(f"/api/tasks/{task_id}/events", params={"limit": 1000}).json()
        [said] = [e["data"] for e in events if e["kind"] == "followup"]
        assert said["attempt"] == second and said["comments"][0]["quoted"] == [[2, "+", DOC.rstrip("\n")]]

        # Through the API: an attempt of the new round (both kept the same diff: the best's work, as is).
        _, new_second = ranked(client, task_id)
        before = unchanged(client, task_id)
        comment = {"path": "calc.py", "start_line": 2, "body": "Keep it."}
        for attempt, code in ((second, "bad_attempt"), (99, "run_not_found")):
            refused = client.post(f"/api/tasks/{task_id}/followup", json={"comments": [comment], "attempt": attempt})
            assert refused.status_code in (400, 422), refused.text
            assert refused.json()["code"] == code, refused.json()
            assert unchanged(client, task_id) == before
        # The command line, through the server, names the attempt the same way.
        alone = cli(served, "followup", task_id, "--attempt", str(new_second))
        assert alone.returncode == 2 and "give a --comment too" in alone.stderr, alone.stderr
        assert unchanged(client, task_id) == before
        agents.add([[FINISH]], [[FINISH]])
        done = cli(served, "followup", task_id, "--comment", "calc.py:2: Keep it.", "--attempt", str(new_second))
        assert done.returncode == 0, done.stderr
        for request in first_requests(agents, range(4, 6)):
            assert f"commented on lines of the diff of attempt {new_second}" in request, request
            assert json.dumps("Keep it.")[1:-1] in request
