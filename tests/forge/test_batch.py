"""A backlog as a batch: ``errand run --issues "label:bug is:open"``, and its one progress view."""

from __future__ import annotations

import re

from engine.cli import errand, script

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
