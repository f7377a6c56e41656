from __future__ import annotations

import os
from pathlib import Path

import pytest

from errand.memory import ArchiveReason, MemoryStore, Source, Status, sync_instructions
from errand.memory.ingest import instruction_files, passages

PROJECT = "/repo/example"

AGENTS = """# Agent guide

## Testing

Run the suite with `pytest -q` from the repository root.

- Integration tests need Docker.
- Never commit to `main` directly.

## Style

Format with `ruff format`; line length is 120.
"""


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "AGENTS.md").write_text(AGENTS)
    return root


def live(store: MemoryStore, path: str | None = None) -> dict[str, int]:
    return {m.text: m.id for m in store.list_memories(PROJECT, source=Source.FILE, path=path, status="active")}


def test_passages_carry_their_heading_and_skip_noise() -> None:
    assert passages(AGENTS) == [
        "Testing: Run the suite with `pytest -q` from the repository root.",
        "Testing: Integration tests need Docker.",
        "Testing: Never commit to `main` directly.",
        "Style: Format with `ruff format`; line length is 120.",
    ]
    assert passages("Set up with:\n```sh\npip install -e .\n```\n") == ["Set up with: `pip install -e .`"]


def test_every_instruction_file_kind_is_found(repo: Path) -> None:
    for name in ("CLAUDE.md", ".cursorrules", ".windsurfrules", "CONTRIBUTING.md", ".github/copilot-instructions.md",
                 ".cursor/rules/python.mdc", ".cursor/rules/nested/js.md"):
        path = repo / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("Use four spaces for indentation in every file.\n")
    assert instruction_files(repo) == [
        "AGENTS.md", "CLAUDE.md", ".cursorrules", ".cursor/rules/nested/js.md", ".cursor/rules/python.mdc",
        ".windsurfrules", ".github/copilot-instructions.md", "CONTRIBUTING.md",
    ]


def test_ingestion_makes_active_instruction_memories_with_file_provenance(store: MemoryStore, repo: Path) -> None:
    report = sync_instructions(store, PROJECT, repo)
    assert report.files == ["AGENTS.md"] and len(report.added) == 4
    memory = store.get(report.added[0])
    assert (memory.kind.value, memory.status, memory.provenance.path) == ("instruction", Status.ACTIVE, "AGENTS.md")
    assert memory.provenance.content_hash is not None and memory.provenance.content_hash.startswith("sha256:")
    again = sync_instructions(store, PROJECT, repo)
    assert (again.added, again.superseded, again.archived) == ([], [], [])
    assert sorted(again.kept) == sorted(report.added)


def test_a_changed_passage_supersedes_and_a_removed_one_is_archived(store: MemoryStore, repo: Path) -> None:
    sync_instructions(store, PROJECT, repo)
    before = live(store)
    changed = AGENTS.replace("`pytest -q` from the repository root", "`pytest -q -n auto` from the repository root")
    (repo / "AGENTS.md").write_text(changed.replace("- Integration tests need Docker.\n", ""))
    report = sync_instructions(store, PROJECT, repo)

    old_id = before["Testing: Run the suite with `pytest -q` from the repository root."]
    ((superseded, new_id),) = report.superseded
    assert superseded == old_id
    old, new = store.get(old_id), store.get(new_id)
    assert (old.status, old.archived_reason, old.superseded_by) == (Status.ARCHIVED, ArchiveReason.SUPERSEDED, new_id)
    assert new.supersedes == old_id and "-n auto" in new.text

    removed = store.get(before["Testing: Integration tests need Docker."])
    assert report.archived == [removed.id]
    assert (removed.status, removed.archived_reason) == (Status.ARCHIVED, ArchiveReason.SOURCE_REMOVED)
    kept = store.get(before["Style: Format with `ruff format`; line length is 120."])
    assert kept.status is Status.ACTIVE and kept.provenance.content_hash != old.provenance.content_hash


def test_a_deleted_file_archives_all_its_memories(store: MemoryStore, repo: Path) -> None:
    (repo / "CLAUDE.md").write_text("Answer in British English.\n")
    sync_instructions(store, PROJECT, repo)
    (repo / "CLAUDE.md").unlink()
    report = sync_instructions(store, PROJECT, repo)
    assert len(report.archived) == 1
    assert live(store, "CLAUDE.md") == {}
    assert len(live(store, "AGENTS.md")) == 4


def test_a_secret_passage_is_skipped_and_counted(store: MemoryStore, repo: Path) -> None:
    (repo / ".cursorrules").write_text("The staging token is ghp_0123456789abcdefghijABCDEFGHIJ012345\n\n"
                                       "Prefer composition over inheritance.\n")
    report = sync_instructions(store, PROJECT, repo)
    assert report.refused == 1
    assert list(live(store, ".cursorrules")) == ["Prefer composition over inheritance."]


def test_a_symlink_out_of_the_repository_is_not_read(store: MemoryStore, repo: Path, tmp_path: Path) -> None:
    outside = tmp_path / "secret-notes.md"
    outside.write_text("Private notes that must never be ingested.\n")
    os.symlink(outside, repo / "CLAUDE.md")
    sync_instructions(store, PROJECT, repo)
    assert live(store, "CLAUDE.md") == {}
