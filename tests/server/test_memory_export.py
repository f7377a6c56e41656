"""Knowledge stays with the team: `errand memory export` is a task a person reviews like any
other, on the command line and on the review page, and accepting it lands AGENTS.md's new
section on a branch."""

from __future__ import annotations

import re
from pathlib import Path

from engine.cli import errand
from engine.harness import git, make_repo, worktree_state

from .conftest import start_server

AGENTS = "# Agents\n\nKeep calc.py free of third-party imports.\n"


def test_an_export_is_a_task_whose_diff_is_reviewed_and_accepted_onto_a_branch(tmp_path: Path) -> None:
    home = tmp_path / "home"
    repo = make_repo(tmp_path / "project", files={"AGENTS.md": AGENTS, "README.md": "# calc\n"})
    where = ("--repo", str(repo))
    assert errand(home, "memory", "sync", *where).returncode == 0  # AGENTS.md's own text is not exported
    for text, kind in (("Run the tests with `python3 test_calc.py`.", "command"),
                       ("add() once subtracted; check the sign in review.", "pitfall")):
        assert errand(home, "memory", "add", text, "--kind", kind, *where).returncode == 0
    assert errand(home, "memory", "add", "A guess nobody approved.", "--proposed", *where).returncode == 0
    (repo / "README.md").write_text("# calc\n\nwork in progress, not committed\n")  # the person's own work
    before = worktree_state(repo)

    exported = errand(home, "memory", "export", *where)
    assert exported.returncode == 0, exported.stderr
    [task_id] = re.findall(r"task (t-[0-9a-f]+) is ready for review", exported.stderr)
    assert "+- Run the tests with `python3 test_calc.py`." in exported.stdout and "+### Pitfalls" in exported.stdout
    assert "A guess nobody approved" not in exported.stdout and "work in progress" not in exported.stdout
    assert worktree_state(repo) == before  # nothing written into the person's checkout

    shown = errand(home, "show", task_id)
    assert "ready_for_review" in shown.stdout and "Export project memory into AGENTS.md" in shown.stdout
    assert "Wrote the 2 approved memories" in shown.stdout
    diff = errand(home, "diff", task_id).stdout
    assert diff.startswith("diff --git a/AGENTS.md b/AGENTS.md") and "+## What errand learned" in diff
    logs = errand(home, "logs", task_id).stdout
    assert "2 approved memories written into AGENTS.md by errand memory export" in logs

    served = start_server(tmp_path, env={"ERRAND_DATABASE_URL": f"sqlite:///{home / 'errand.db'}"})
    try:
        with served.client() as client:
            page = client.get(f"/tasks/{task_id}/review")
            assert page.status_code == 200
            assert "Export project memory into AGENTS.md" in page.text
            assert "Run the tests with" in page.text and "Keep calc.py free" in page.text  # diff and context
            assert f'action="/tasks/{task_id}/accept"' in page.text and "Accept attempt 1" in page.text
    finally:
        served.stop()

    accepted = errand(home, "accept", task_id)
    assert accepted.returncode == 0, accepted.stderr
    branch = git(repo, "for-each-ref", "--format=%(refname:short)", "refs/heads/errand/").strip()
    assert branch.startswith(f"errand/{task_id}-export-project-memory")
    landed = git(repo, "show", f"{branch}:AGENTS.md")
    assert landed.startswith(AGENTS) and "- add() once subtracted; check the sign in review." in landed
    assert git(repo, "rev-parse", f"{branch}^").strip() == git(repo, "rev-parse", "main").strip()
    assert worktree_state(repo) == before
    again = errand(home, "memory", "export", *where, "--base", branch)
    assert again.returncode == 0 and "already holds every approved memory" in again.stdout
