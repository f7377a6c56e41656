"""A backlog as a batch: ``errand run --issues "label:bug is:open"``, and its one progress view."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from components import needs
from engine.cli import errand, script
from errand.forge.links import LinkStore
from errand.tasks.store.tasks import TaskStore
from server.browsing import Person
from server.conftest import start_server

from .conftest import REPO, Forged


def test_a_batch_starts_one_task_per_issue_once_and_shows_its_progress(forged: Forged) -> None:
    fake = forged.fake
    bugs = [fake.add_issue(REPO, f"bug {n}", f"body {n}", labels=("bug",)) for n in range(5)]
    fake.add_issue(REPO, "a feature", "not a bug", labels=("enhancement",))
    closed = fake.add_issue(REPO, "an old bug", "fixed", labels=("bug",))
    closed["state"] = "closed"
    model = script(forged.home / "none.json", [])

    ran = errand(forged.home, "run", "--issues", "label:bug is:open", "--limit", "20", "--repo", str(forged.project),
                 "--model", model, "--no-worker", env=forged.env)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.count(" queued: #") == 5
    batch = re.search(r"batch (b-[0-9a-f]{8}): 5 task\(s\) started", ran.stdout)
    assert batch is not None, ran.stdout

    again = errand(forged.home, "run", "--issues", f"repo:{REPO} label:bug is:open", "--model", model,
                   "--repo", str(forged.project), "--no-worker", env=forged.env)
    assert again.returncode == 0, again.stderr
    assert "0 task(s) started" in again.stdout and again.stdout.count(" left: task t-") == 5

    shown = errand(forged.home, "forge", "ls", "--batch", batch.group(1), env=forged.env)
    assert shown.returncode == 0, shown.stderr
    for issue in bugs:
        assert f"{REPO}#{issue['number']}" in shown.stdout
    assert f"#{closed['number']} " not in shown.stdout and "5 queued" in shown.stdout


def test_a_batch_needs_to_know_its_repository(forged: Forged) -> None:
    (forged.home / "forge.toml").write_text(f'[github]\nbase_url = "{forged.fake.api_url}"\n')
    ran = errand(forged.home, "run", "--issues", "label:bug", "--repo", str(forged.project), "--model", "scripted:x",
                 "--no-worker", env=forged.env)
    assert ran.returncode == 2 and "which repository?" in ran.stderr


def batch_at_every_stage(forged: Forged) -> tuple[str, list[dict[str, Any]], dict[int, str]]:
    """A batch of three bugs: one waiting for a person, one cancelled, one queued with a pull
    request and a red CI recorded (a check whose URL is no web address among them)."""
    fake = forged.fake
    bugs = [fake.add_issue(REPO, f"bug {n}", f"body {n}", labels=("bug",)) for n in range(3)]
    model = script(forged.home / "none.json", [])
    ran = errand(forged.home, "run", "--issues", "label:bug", "--repo", str(forged.project), "--model", model,
                 "--no-worker", env=forged.env)
    assert ran.returncode == 0, ran.stderr
    batch = re.search(r"batch (b-[0-9a-f]{8})", ran.stdout)
    assert batch is not None and f"/forge/batches/{batch.group(1)}" in ran.stdout
    ids = re.findall(r"^(t-\S+) queued: #(\d+)", ran.stdout, re.M)
    by_issue = {int(number): task_id for task_id, number in ids}
    waiting, cancelled, pushed = (by_issue[b["number"]] for b in bugs)
    with TaskStore.open() as store:  # the states a batch passes through, as the engine would leave them
        for target in ("preparing", "running", "needs_input"):
            store.set_state(waiting, target)
        links = LinkStore(store.engine)
        links.update(pushed, pull=41, pull_url=f"{fake.url}/{REPO}/pull/41", pushed="ab" * 20)
        store.append_event(pushed, None, "forge_checks", {"commit": "ab" * 20, "checks": [
            {"name": "tests", "state": "failure", "url": f"{fake.url}/runs/7"},
            {"name": "lint", "state": "success", "url": "javascript:alert(1)"}]})
    assert errand(forged.home, "cancel", cancelled, "--yes", env=forged.env).returncode == 0
    return batch.group(1), bugs, by_issue


def test_the_batch_page_shows_each_issue_where_it_stands_with_its_links(forged: Forged, tmp_path: Path) -> None:
    fake = forged.fake
    batch_id, bugs, by_issue = batch_at_every_stage(forged)
    waiting = by_issue[bugs[0]["number"]]
    served = start_server(tmp_path, "--no-engine", env={**forged.env, "ERRAND_DATABASE_URL": ""})
    try:
        listed = httpx.get(f"{served.url}/forge", timeout=30)
        assert listed.status_code == 200 and f'href="/forge/batches/{batch_id}"' in listed.text
        shown = httpx.get(f"{served.url}/forge/batches/{batch_id}", timeout=30)
        missing = httpx.get(f"{served.url}/forge/batches/b-00000000", timeout=30)
    finally:
        served.stop()
    assert shown.status_code == 200, shown.text
    assert missing.status_code == 404 and "no batch b-00000000" in missing.text
    rows = {int(m.group(1)): m.group(0) for m in re.finditer(
        rf'<tr>\s*<th scope="row"><a href="{re.escape(fake.url)}/{REPO}/issues/(\d+)">.*?</tr>', shown.text, re.S)}
    assert set(rows) == {b["number"] for b in bugs}
    assert "waiting for a person" in rows[bugs[0]["number"]] and f'href="/tasks/{waiting}"' in rows[bugs[0]["number"]]
    assert ">cancelled<" in rows[bugs[1]["number"]]
    row = rows[bugs[2]["number"]]
    assert ">queued<" in row and f'<a href="{fake.url}/{REPO}/pull/41">#41</a>' in row
    assert ">red<" in row and f'<a href="{fake.url}/runs/7">tests: failure</a>' in row
    assert "lint: success" in row and "javascript:" not in shown.text  # a check's URL is a link only if http(s)
    progress = re.search(r'<p role="status" aria-label="Progress">(.*?)</p>', shown.text, re.S)
    assert progress is not None
    assert [re.sub(r"<[^>]+>", "", part).strip() for part in progress.group(1).split("</span>") if part.strip()] == [
        "1 queued", "1 waiting for a person", "1 cancelled"]


@pytest.mark.slow
@needs("chromium")
def test_the_batch_page_in_a_browser(forged: Forged, tmp_path: Path, browser: Any, artifacts: Path) -> None:
    playwright = pytest.importorskip("playwright.sync_api")
    batch_id, bugs, _ = batch_at_every_stage(forged)
    served = start_server(tmp_path, "--no-engine", env={**forged.env, "ERRAND_DATABASE_URL": ""})
    try:
        person = Person(browser, served.url, artifacts)
        page, expect = person.page, playwright.expect
        page.goto(served.url)
        page.get_by_role("navigation", name="Main").get_by_role("link", name="Forge").click()
        page.get_by_role("link", name=batch_id).click()
        table = page.get_by_role("table", name=f"Issues of batch {batch_id}")
        waiting = table.get_by_role("row").filter(has=page.get_by_role("link", name=f"{REPO}#{bugs[0]['number']}"))
        expect(waiting.get_by_role("cell").nth(1)).to_have_text("waiting for a person")
        expect(page.get_by_role("status", name="Progress")).to_have_text(
            re.compile(r"1 queued\s+1 waiting for a person\s+1 cancelled"))
        expect(table.get_by_role("link", name="tests: failure")).to_have_attribute("href", f"{forged.fake.url}/runs/7")
        person.shoot("forge-batch")  # and it does not scroll sideways at 390 px
        assert person.errors == []
    finally:
        served.stop()
