from __future__ import annotations

from errand.memory import (
    ArchiveReason,
    Kind,
    MemoryStore,
    Source,
    Status,
    observe_command,
    observe_fix,
    observe_followup,
    observe_review,
)

PROJECT = "/repo/example"


def test_a_working_command_becomes_an_active_memory_and_gains_evidence(store: MemoryStore) -> None:
    first = observe_command(store, PROJECT, "pytest  -q", 0, kind="test", task_id="t-1", event_id=4)
    assert first is not None
    assert (first.kind, first.status, first.text) == (Kind.COMMAND, Status.ACTIVE,
                                                      "The test command that works here: `pytest -q`")
    assert first.provenance.describe() == "task t-1 event 4 (test command, exit 0)"
    again = observe_command(store, PROJECT, "pytest -q", 0, kind="test", task_id="t-2", event_id=9)
    assert again is not None and (again.id, again.evidence) == (first.id, 2)


def test_a_failing_test_run_is_not_a_lesson(store: MemoryStore) -> None:
    assert observe_command(store, PROJECT, "pytest -q", 1, kind="test", task_id="t-1") is None
    assert store.list_memories(PROJECT) == []


def test_a_command_that_cannot_run_supersedes_the_memory_that_it_works(store: MemoryStore) -> None:
    works = observe_command(store, PROJECT, "make test", 0, kind="test", task_id="t-1")
    pitfall = observe_command(store, PROJECT, "make test", 127, kind="test", task_id="t-2", event_id=3)
    assert works is not None and pitfall is not None
    assert (pitfall.kind, pitfall.status, pitfall.supersedes) == (Kind.PITFALL, Status.ACTIVE, works.id)
    assert pitfall.text == "Do not use `make test` to test: it is not found here (exit 127)."
    old = store.get(works.id)
    assert (old.status, old.archived_reason, old.superseded_by) == (Status.ARCHIVED, ArchiveReason.SUPERSEDED,
                                                                    pitfall.id)
    fixed = observe_command(store, PROJECT, "make test", 0, kind="test", task_id="t-3")
    assert fixed is not None and fixed.supersedes == pitfall.id and fixed.status is Status.ACTIVE
    assert store.get(pitfall.id).status is Status.ARCHIVED


def test_a_fix_is_remembered_as_a_pitfall(store: MemoryStore) -> None:
    memory = observe_fix(store, PROJECT, command="pytest", error="ModuleNotFoundError: No module named 'app'",
                         fix="install the package first with `pip install -e .`", task_id="t-3", event_id=12)
    assert (memory.kind, memory.status, memory.confidence) == (Kind.PITFALL, Status.ACTIVE, 0.6)
    assert "`pip install -e .`" in memory.text and memory.provenance.event_id == 12


def test_a_rejection_reason_is_kept_in_the_reviewers_words(store: MemoryStore) -> None:
    memory = observe_review(store, PROJECT, "t-4", "rejected", "Do not add new dependencies without asking first.")
    assert memory is not None
    assert (memory.kind, memory.status) == (Kind.PREFERENCE, Status.ACTIVE)
    assert memory.text == 'A reviewer rejected a change, saying: "Do not add new dependencies without asking first."'
    assert memory.provenance.source is Source.REVIEW
    assert memory.provenance.describe() == "review of task t-4 (rejected)"


def test_curt_verdicts_teach_nothing(store: MemoryStore) -> None:
    assert observe_review(store, PROJECT, "t-5", "rejected", "lol no") is None
    assert observe_review(store, PROJECT, "t-5", "accepted", None) is None
    assert store.list_memories(PROJECT) == []


def test_a_followup_is_proposed_not_active(store: MemoryStore) -> None:
    memory = observe_followup(store, PROJECT, "t-6", "Also update the changelog for every user-facing change.")
    assert memory is not None and memory.status is Status.PROPOSED
    via_review = observe_review(store, PROJECT, "t-7", "followup", "Please add a regression test for the bug.")
    assert via_review is not None and via_review.status is Status.PROPOSED
    assert via_review.provenance.detail == "followup"
