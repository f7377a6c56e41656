"""An evaluation run as a person reads it, in a real browser at 1280 and 390 px: the HTML
report `errand eval run` leaves in the run directory, and the web UI's /eval pages of
`errand serve`. The agent wrote markup into its patch and its shell commands; the pages
show it as text and run none of it. Screenshots go to the directory the test prints."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import pytest
from typer.testing import CliRunner

from components import needs
from engine.harness import openai_turn
from errand.cli import app
from models.wire import WireServer
from server.browsing import Person
from server.conftest import artifacts, browser, start_server  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.slow, needs("chromium")]
playwright = pytest.importorskip("playwright.sync_api")

INSTANCE = "errand-eval__tally-1"
SCRIPT_TAG = "<script>alert(1)</script>"
IMG_TAG = "<img src=x onerror=alert(2)>"
TOTAL_FIX = ("edit_file", {"path": "src/tally/core.py", "old": "return round(sum(amounts))",
                           "new": "return round(sum(amounts), 2)"})
HOSTILE_EDIT = ("edit_file", {"path": "src/tally/core.py", "old": "return round(sum(amounts))",
                              "new": f"return '{SCRIPT_TAG}'"})
HOSTILE_SHELL = ("shell", {"command": f"echo '{IMG_TAG}'"})
FINISH = ("finish", {"summary": "done", "assumptions": []})
SCRIPTS = [[[HOSTILE_SHELL], [TOTAL_FIX], [FINISH]],  # attempt 1 resolves
           [[HOSTILE_EDIT], [FINISH]]]  # attempt 2 breaks total()


@pytest.fixture(scope="module")
def run(wire: WireServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two attempts of the agent at one sample instance, through `errand eval run`."""
    n = 0
    for script in SCRIPTS:
        for turn in script:
            wire.answer(openai_turn(turn, n))
            n += 1
    where = tmp_path_factory.mktemp("runs") / "run-tally"
    result = CliRunner().invoke(app, ["eval", "run", "sample", "--model", "openai:wire-model", "-k", "2",
                                      "-i", INSTANCE, "--run-dir", str(where)])
    assert result.exit_code == 0, result.output
    assert "report.html" in result.output
    return where


def summary_of(run: Path) -> dict[str, Any]:
    summary: dict[str, Any] = json.loads((run / "summary.json").read_text())
    return summary


def watch(person: Person) -> list[str]:
    """Every dialog a page opens (an alert would mean the agent's markup ran)."""
    opened: list[str] = []
    for page in (person.page, person.narrow):
        page.on("dialog", lambda dialog: (opened.append(dialog.message), dialog.dismiss()))
    return opened


def check_summary(page: playwright.Page, run: Path) -> None:
    expect = playwright.expect
    summary = page.get_by_role("region", name="Summary")
    resolved = summary.locator("dl.figures div", has=page.locator("dt", has_text="Resolved")).locator("dd")
    expect(resolved.first).to_have_text("1 of 2 attempts")
    # By hand: one instance, n=2, c=1: pass@1 = 1/2, pass@2 = 1; pass^1 = 1/2, pass^2 = 0.
    rows = page.get_by_role("table", name="pass@k and pass^k").locator("tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.nth(0).locator("td")).to_have_text(["0.500", "0.500"])
    expect(rows.nth(1).locator("td")).to_have_text(["1.000", "0.000"])
    calibration = page.get_by_role("table", name="Calibration").locator("tbody tr")
    expected = [[row["confidence"], str(row["attempts"]), str(row["resolved"])]
                for row in summary_of(run)["calibration"]]
    for n, (level, attempts, resolved_count) in enumerate(expected):
        expect(calibration.nth(n).locator("th")).to_have_text(level)
        expect(calibration.nth(n).locator("td").nth(0)).to_have_text(attempts)
        expect(calibration.nth(n).locator("td").nth(1)).to_have_text(resolved_count)
    assert sum(int(row[1]) for row in expected) == 2
    failures = page.get_by_role("region", name="Failures")
    expect(failures.get_by_role("list", name="The agent's")).to_have_text("tests_failed ×1")
    expect(failures.locator("h3#failures-infrastructure + p")).to_have_text("None.")


def test_the_html_report_shows_the_figures_and_each_attempt_as_text(
        run: Path, browser: playwright.Browser, artifacts: Path) -> None:  # noqa: F811
    report = run / "report.html"
    person = Person(browser, report.as_uri(), artifacts)
    dialogs = watch(person)
    page, expect = person.page, playwright.expect
    page.goto(report.as_uri())
    expect(page.get_by_role("heading", level=1)).to_have_text("Evaluation run-tally")
    check_summary(page, run)
    row = page.get_by_role("table", name="Instances").get_by_role("row", name=re.compile(INSTANCE))
    expect(row.locator("td").first).to_have_text("1/2")

    row.get_by_role("link", name="attempt-2: unresolved (tests_failed)").click()
    assert page.url.endswith(f"#attempt-{INSTANCE}-attempt-2")
    second = page.get_by_role("article", name=f"{INSTANCE} attempt-2")
    expect(second).to_be_in_viewport()
    expect(second.locator("dl.figures dd").first).to_have_text("unresolved")
    expect(second.locator("table.diff tr.add")).to_contain_text([f"return '{SCRIPT_TAG}'"])
    first = page.get_by_role("article", name=f"{INSTANCE} attempt-1")
    expect(first.get_by_role("list", name="Trajectory of attempt-1")).to_contain_text(f"$ echo '{IMG_TAG}'")
    expect(first.locator("table.diff tr.add")).to_contain_text(["return round(sum(amounts), 2)"])
    trajectory = first.get_by_role("link", name="trajectory.json").get_attribute("href")
    assert trajectory and (run / unquote(urlparse(trajectory).path)).is_file()
    person.shoot("eval-report")

    assert page.locator("script, img, iframe").count() == 0  # the agent's markup is text, not elements
    assert dialogs == [] and person.errors == []


@pytest.fixture
def served_runs(run: Path, tmp_path: Path) -> Iterator[str]:
    served = start_server(tmp_path, "--no-engine", env={"ERRAND_EVAL_RUNS": str(run.parent)})
    yield served.url
    served.stop()


def test_the_eval_pages_list_the_run_and_drill_down_to_diff_and_trajectory(
        run: Path, served_runs: str, browser: playwright.Browser, artifacts: Path) -> None:  # noqa: F811
    person = Person(browser, served_runs, artifacts)
    dialogs = watch(person)
    page, expect = person.page, playwright.expect
    page.goto(f"{served_runs}/")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Evals").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Evaluation runs")
    expect(page.get_by_role("link", name="Evals")).to_have_attribute("aria-current", "page")
    listed = page.get_by_role("table", name="Evaluation runs").get_by_role("row", name=re.compile("run-tally"))
    expect(listed.locator("td")).to_have_text(["run", "openai:wire-model", "1", "1 of 2 attempts", "0.500",
                                               re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d")])
    person.shoot("eval-list")

    listed.get_by_role("link", name="run-tally").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Evaluation run-tally")
    check_summary(page, run)
    person.shoot("eval-run")

    page.get_by_role("link", name="attempt-2: unresolved (tests_failed)").click()
    expect(page.get_by_role("heading", level=1)).to_have_text(f"{INSTANCE} attempt-2")
    expect(page.locator("table.diff tr.add")).to_contain_text([f"return '{SCRIPT_TAG}'"])
    expect(page.locator("dl.figures dd").first).to_have_text("unresolved")
    person.shoot("eval-attempt")

    page.get_by_role("link", name="run-tally").click()
    page.get_by_role("link", name="attempt-1: resolved").click()
    expect(page.get_by_role("list", name="Trajectory of attempt-1")).to_contain_text(f"$ echo '{IMG_TAG}'")
    expect(page.locator("table.diff tr.add")).to_contain_text(["return round(sum(amounts), 2)"])
    assert page.locator("main img, main script").count() == 0
    person.shoot("eval-attempt-trajectory")
    assert dialogs == [] and person.errors == []

    for missing in (f"run-tally/{INSTANCE}/attempt-9", "..%2F..%2Fetc", "run-tally/..%2F..%2F/attempt-1"):
        page.goto(f"{served_runs}/eval/{missing}")
        expect(page.get_by_role("heading", level=1)).to_contain_text("Not Found")


def test_report_html_writes_the_report_again(run: Path) -> None:
    (run / "report.html").unlink()
    result = CliRunner().invoke(app, ["eval", "report", str(run), "--html"])
    assert result.exit_code == 0, result.output
    assert f"wrote {run / 'report.html'}" in result.output.replace("\n", "")
    assert SCRIPT_TAG not in (run / "report.html").read_text()  # escaped, every time
