"""The Sandboxes API and page show this errand home's sandboxes with their labels (the
task one serves is a link to it), and never another home's, even in a shared runtime
directory: that one is neither listed nor ended by id."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import forkserver
from components import needs
from errand import Sandbox

from .conftest import Served

CHROMIUM = Path("/usr/bin/chromium")
INSTRUCTION = "Make test_calc.py pass"


def other_home(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``errand`` as a second home would run it: its own ERRAND_HOME, the same runtime directory."""
    env = {**os.environ, "ERRAND_HOME": str(tmp_path / "other-home")}
    return forkserver.run([*args], timeout=120, env=env, check=False)


@dataclass
class Scene:
    served: Served
    task_id: str
    run_id: str
    ours: str
    theirs: str


@pytest.fixture
def scene(serve: Callable[..., Served], repo: Path, tmp_path: Path) -> Iterator[Scene]:
    served = serve("--no-engine")
    with served.client() as client:
        created = client.post("/api/tasks", json={"instruction": INSTRUCTION, "repo": str(repo),
                                                  "model": "openai:wire-model"})
        assert created.status_code == 201, created.text
    task_id = created.json()["id"]
    run_id = f"{task_id}-r1"
    ours = Sandbox.create(timeout=120, labels={"task": task_id, "run": run_id})
    made = other_home(tmp_path, "sandbox", "create", "--timeout", "120")
    assert made.returncode == 0, made.stderr
    theirs = made.stdout.strip()
    try:
        yield Scene(served, task_id, run_id, ours.id, theirs)
    finally:
        ours.terminate()
        # Without --yes, and no terminal to confirm on, rm changes nothing: the other home's sandbox
        # ran out its two minutes, and its cgroup outlived the test's home.
        removed = other_home(tmp_path, "sandbox", "rm", "--yes", theirs)
        assert removed.returncode == 0, removed.stderr


def test_the_api_lists_this_homes_sandboxes_with_labels_and_cannot_end_anothers(
        scene: Scene, tmp_path: Path) -> None:
    with scene.served.client() as client:
        listed = {entry["id"]: entry for entry in client.get("/api/sandboxes").json()}
        assert listed[scene.ours]["labels"] == {"task": scene.task_id, "run": scene.run_id}
        assert scene.theirs not in listed
        for method, path in (("DELETE", f"/api/sandboxes/{scene.theirs}"),
                             ("GET", f"/api/sandboxes/{scene.theirs}/egress")):
            refused = client.request(method, path)
            assert refused.status_code == 404 and refused.json()["code"] == "sandbox_not_found", refused.text
    still = json.loads(other_home(tmp_path, "sandbox", "ls", "--json").stdout)
    assert [entry["id"] for entry in still] == [scene.theirs]


@pytest.mark.slow
@needs("chromium")
def test_the_page_shows_the_labels_links_the_task_and_hides_another_homes_sandbox(scene: Scene) -> None:
    playwright = pytest.importorskip("playwright.sync_api")
    with playwright.sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        try:
            page = browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.goto(f"{scene.served.url}/sandboxes")
            expect = playwright.expect
            card = page.get_by_role("region", name=f"Task {scene.task_id} {scene.run_id}")
            expect(card).to_be_visible()  # named by the task it serves, not by its own id
            figures = card.locator("dl.figures")
            expect(figures.get_by_role("term")).to_have_text(["Started", "CPU", "Memory", "Isolation"])
            expect(figures.get_by_role("definition").nth(1)).to_have_text(re.compile(r"^\d+(\.\d)?s$"))
            expect(figures.get_by_role("definition").nth(2)).to_have_text(re.compile(r"\d (KiB|MiB)"))
            card.get_by_text("Details").click()
            expect(card.locator("code", has_text=scene.ours)).to_be_visible()  # the id is still there, one click away
            expect(page.get_by_text(scene.theirs)).to_have_count(0)
            expect(page.get_by_role("button", name=f"Terminate {scene.theirs}")).to_have_count(0)
            card.get_by_role("link", name=scene.task_id).click()
            expect(page.get_by_role("heading", name=INSTRUCTION)).to_be_visible()
            assert page.url.endswith(f"/tasks/{scene.task_id}")
            narrow = browser.new_page(viewport={"width": 390, "height": 844})
            narrow.goto(f"{scene.served.url}/sandboxes")
            assert narrow.evaluate("document.documentElement.scrollWidth") <= 390, "scrolls sideways at 390 px"
            assert errors == []
        finally:
            browser.close()


def test_a_page_post_cannot_end_another_homes_sandbox(scene: Scene, tmp_path: Path) -> None:
    """The terminate form's endpoint, given the other home's id, says it is not found."""
    with scene.served.client() as client:
        page = client.get("/sandboxes")
        token = page.text.split('name="csrf_token" value="', 1)[1].split('"', 1)[0]
        refused = client.post(f"/sandboxes/{scene.theirs}/terminate", data={"csrf_token": token})
        assert refused.status_code == 404, refused.text
    assert scene.theirs in other_home(tmp_path, "sandbox", "ls", "--json").stdout
