"""The memory half of issue 6's end-to-end: what one task teaches, the next is given, with its sources."""

from __future__ import annotations

from pathlib import Path

from errand.memory import MemoryStore, observe_command, observe_review, project_key, retrieve, sync_instructions


def test_what_one_task_teaches_the_next_is_given_with_provenance(store: MemoryStore, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "AGENTS.md").write_text("## Style\n\nKeep functions short and typed.\n")
    project = project_key(repo)

    # Task 1: instructions read, its test command worked, and the reviewer rejected it with a reason.
    sync_instructions(store, project, repo)
    observe_command(store, project, "python -m pytest -q tests", 0, kind="test", task_id="t-first", event_id=5)
    observe_review(store, project, "t-first", "rejected", "Never change the public API without a deprecation.")

    # Task 2: its instruction retrieves those lessons, each with where it came from.
    given = retrieve(store, project, "Rename the public parse function and run the tests", k=3, repo_dir=repo)
    store.record_use("t-second", [item.memory.id for item in given], "given")
    context = "\n".join(item.render() for item in given)
    assert "`python -m pytest -q tests` — source: task t-first event 5" in context
    assert "Never change the public API without a deprecation.\" — source: review of task t-first (rejected)" \
        in context
    assert [how for _, how in store.uses("t-second")] == ["given"] * len(given)
