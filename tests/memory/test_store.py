from __future__ import annotations

import pytest

from errand.memory import (
    ArchiveReason,
    InvalidMemory,
    Kind,
    MemoryNotFound,
    MemoryStore,
    Provenance,
    SecretRefused,
    Source,
    Status,
)

PROJECT = "/repo/example"


def add(store: MemoryStore, text: str, **options: object) -> int:
    options.setdefault("kind", Kind.FACT)
    options.setdefault("provenance", Provenance.person())
    return store.add(PROJECT, text, **options).id  # type: ignore[arg-type]


def count(store: MemoryStore) -> int:
    return len(store.list_memories(PROJECT, limit=10_000))


def test_a_memory_keeps_its_provenance(store: MemoryStore) -> None:
    memory = store.add(PROJECT, "The test command that works here: `pytest -q`", kind="command",
                       provenance=Provenance.task("t-abc", 12, "test command, exit 0"), confidence=0.9)
    again = store.get(memory.id)
    assert again == memory
    assert (again.kind, again.status, again.evidence, again.use_count) == (Kind.COMMAND, Status.ACTIVE, 1, 0)
    assert again.provenance.source is Source.TASK
    assert again.provenance.describe() == "task t-abc event 12 (test command, exit 0)"
    assert again.to_json()["provenance"] == {"source": "task", "task_id": "t-abc", "event_id": 12,
                                             "detail": "test command, exit 0"}


def test_exact_duplicate_is_merged_and_counts_as_evidence(store: MemoryStore) -> None:
    first = add(store, "Run `make lint` before pushing.")
    second = store.add(PROJECT, "  run `make lint`   before pushing.  ", kind="fact",
                       provenance=Provenance.task("t-2"), confidence=0.5)
    assert second.id == first
    assert second.evidence == 2
    assert second.confidence == 1.0  # the higher of the two
    assert second.provenance.source is Source.PERSON  # the first provenance is kept
    assert count(store) == 1


def test_near_duplicate_is_merged(store: MemoryStore) -> None:
    first = add(store, "The integration tests need Docker running before `make test`.")
    merged = store.add(PROJECT, "Integration tests need docker running before make test", kind="pitfall",
                       provenance=Provenance.task("t-3"))
    assert merged.id == first and merged.evidence == 2
    different = add(store, "Unit tests run without Docker.")
    assert different != first
    assert count(store) == 2


def test_an_observed_repeat_confirms_a_proposal(store: MemoryStore) -> None:
    proposed = add(store, "Use ruff for formatting.", status=Status.PROPOSED)
    confirmed = store.add(PROJECT, "use ruff for formatting", kind="convention", provenance=Provenance.task("t-4"))
    assert confirmed.id == proposed and confirmed.status is Status.ACTIVE


def test_a_rejected_memory_is_never_proposed_back_to_life(store: MemoryStore) -> None:
    joke = add(store, "Always name variables after cheeses.", status=Status.PROPOSED)
    store.reject(joke)
    again = store.add(PROJECT, "Always name variables after cheeses", kind="convention",
                      provenance=Provenance.task("t-5"), status=Status.ACTIVE)
    assert again.id == joke
    assert again.status is Status.ARCHIVED and again.archived_reason is ArchiveReason.REJECTED


def test_memories_of_other_projects_are_not_merged(store: MemoryStore) -> None:
    first = add(store, "Run `tox` to test.")
    other = store.add("/another/repo", "Run `tox` to test.", kind="fact", provenance=Provenance.person())
    assert other.id != first


def test_supersession_archives_and_links_both_ways(store: MemoryStore) -> None:
    old = add(store, "The test command is `python setup.py test`.", kind=Kind.COMMAND)
    new = store.add(PROJECT, "The test command is `pytest -q`.", kind="command", provenance=Provenance.person(),
                    supersedes=old)
    before = store.get(old)
    assert (before.status, before.archived_reason, before.superseded_by) == \
        (Status.ARCHIVED, ArchiveReason.SUPERSEDED, new.id)
    assert new.supersedes == old and new.status is Status.ACTIVE
    with pytest.raises(InvalidMemory):
        store.add("/another/repo", "x is y here", kind="fact", provenance=Provenance.person(), supersedes=new.id)


def test_secret_is_refused_and_nothing_is_written(store: MemoryStore) -> None:
    with pytest.raises(SecretRefused) as refused:
        add(store, "Deploy with AWS key AKIAIOSFODNN7EXAMPLE")
    assert refused.value.code == "secret_refused" and refused.value.detector == "aws_access_key"
    assert "AKIAIOSFODNN7EXAMPLE" not in refused.value.message
    assert count(store) == 0
    memory = add(store, "Deploy credentials live in $AWS_ACCESS_KEY_ID, never in the repository.")
    with pytest.raises(SecretRefused):
        store.edit(memory, text="password = Tr0ub4dor&3")
    assert store.get(memory).text.startswith("Deploy credentials")


@pytest.mark.parametrize(("text", "options", "code"), [
    ("   ", {}, "empty_memory"),
    ("x" * 5000, {}, "memory_too_long"),
    ("fine", {"kind": "rumour"}, "invalid_memory"),
    ("fine", {"confidence": 1.5}, "invalid_memory"),
    ("Broken Unicode \ud83d here", {}, "invalid_text"),
])
def test_bad_input_is_refused(store: MemoryStore, text: str, options: dict[str, object], code: str) -> None:
    with pytest.raises(InvalidMemory) as refused:
        add(store, text, **options)
    assert refused.value.code == code
    assert count(store) == 0


def test_status_moves(store: MemoryStore) -> None:
    memory = add(store, "Prefer small commits.", status=Status.PROPOSED)
    assert store.approve(memory).status is Status.ACTIVE
    with pytest.raises(InvalidMemory) as illegal:
        store.reject(memory)
    assert illegal.value.code == "illegal_status"
    archived = store.archive(memory)
    assert (archived.status, archived.archived_reason) == (Status.ARCHIVED, ArchiveReason.ARCHIVED)
    with pytest.raises(InvalidMemory):
        store.approve(memory)


def test_edit_and_remove(store: MemoryStore) -> None:
    memory = add(store, "Docs are built with `mkdocs`.")
    edited = store.edit(memory, text="Docs are built with `sphinx-build docs out`.", kind="command")
    assert (edited.text, edited.kind) == ("Docs are built with `sphinx-build docs out`.", Kind.COMMAND)
    newer = store.add(PROJECT, "Docs: `make docs`.", kind="command", provenance=Provenance.person(),
                      supersedes=memory)
    store.remove(memory)
    with pytest.raises(MemoryNotFound):
        store.get(memory)
    assert store.get(newer.id).supersedes is None


def test_list_filters(store: MemoryStore) -> None:
    add(store, "Use `uv` to manage the environment.", kind=Kind.COMMAND)
    add(store, "Tabs are forbidden in Python files.", kind=Kind.CONVENTION, status=Status.PROPOSED)
    assert [m.kind for m in store.list_memories(PROJECT, status="proposed")] == [Kind.CONVENTION]
    assert [m.kind for m in store.list_memories(PROJECT, kind="command")] == [Kind.COMMAND]
    assert store.list_memories("/nowhere") == []
    assert store.projects() == [PROJECT]


def test_uses_are_recorded_and_counted(store: MemoryStore) -> None:
    first, second = add(store, "Run `npm ci`, not `npm install`."), add(store, "Node 20 is required.")
    store.record_use("t-9", [first, second], "given")
    store.record_use("t-9", [second], "used")
    assert [(m.id, how) for m, how in store.uses("t-9")] == [(first, "given"), (second, "given"), (second, "used")]
    assert (store.get(first).use_count, store.get(second).use_count) == (0, 1)
    assert store.get(second).last_used_at is not None
    with pytest.raises(MemoryNotFound):
        store.record_use("t-9", [999], "given")
    with pytest.raises(InvalidMemory):
        store.record_use("t-9", [first], "liked")
