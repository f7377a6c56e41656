"""The approved memories written into a marked section of AGENTS.md: grouped by kind, one line each,
the rest of the file left as it was, a second export replacing the section, and a path outside the
repository refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from errand.memory import InvalidMemory, Kind, MemoryStore, Provenance, Status
from errand.memory.export import BEGIN, END, export_section, exported_memories, render_section, without_section

PROJECT = "/repo/example"
HEAD = "# Agents\n\nRun `make test` before pushing.\n"


def add(store: MemoryStore, text: str, kind: Kind, **options: object) -> int:
    options.setdefault("provenance", Provenance.person())
    return store.add(PROJECT, text, kind=kind, **options).id  # type: ignore[arg-type]


@pytest.fixture
def taught(lexical_store: MemoryStore) -> MemoryStore:
    add(lexical_store, "Reviewers want one change per commit.", Kind.PREFERENCE)
    add(lexical_store, "Run the linter with\n  `ruff check .`", Kind.COMMAND)
    add(lexical_store, "Never edit generated files under gen/.", Kind.PITFALL)
    add(lexical_store, "Use pytest for new tests.", Kind.INSTRUCTION,
        provenance=Provenance.file("AGENTS.md", "ab" * 32))
    add(lexical_store, "Prefer dataclasses to dicts.", Kind.CONVENTION, status=Status.PROPOSED)
    return lexical_store


def test_only_active_memories_not_read_from_an_instruction_file_are_exported(taught: MemoryStore) -> None:
    assert sorted(memory.text for memory in exported_memories(taught, PROJECT)) == [
        "Never edit generated files under gen/.", "Reviewers want one change per commit.",
        "Run the linter with\n  `ruff check .`"]


def test_the_section_groups_kinds_in_order_one_line_each(taught: MemoryStore) -> None:
    memories = exported_memories(taught, PROJECT)
    section = render_section(memories)
    assert section.startswith(BEGIN + "\n## What errand learned about this project\n") and section.endswith(END + "\n")
    ids = {memory.text.split()[0]: memory.id for memory in memories}
    assert f"### Commands that work\n\n- Run the linter with `ruff check .` (memory {ids['Run']})\n" in section
    assert section.index("### Commands that work") < section.index("### Pitfalls") < section.index(
        "### What reviewers want")
    assert "### Conventions" not in section and "### Instructions" not in section
    assert render_section([]) == f"{BEGIN}\n## What errand learned about this project\n\n{END}\n"


def test_an_export_keeps_the_rest_of_the_file_and_a_second_replaces_the_section(taught: MemoryStore,
                                                                               tmp_path: Path) -> None:
    (tmp_path / "AGENTS.md").write_text(HEAD)
    new, diff = export_section(taught, PROJECT, tmp_path)
    assert new.startswith(HEAD + "\n" + BEGIN) and new.count(BEGIN) == 1
    assert diff.startswith("--- a/AGENTS.md\n+++ b/AGENTS.md\n") and "+- Never edit generated files" in diff
    assert (tmp_path / "AGENTS.md").read_text() == HEAD  # the file is only written by the caller
    (tmp_path / "AGENTS.md").write_text(new + "\n## Later\n\nWritten by a person.\n")
    again, _ = export_section(taught, PROJECT, tmp_path, chosen=[])
    assert again == HEAD + "\n" + render_section([]) + "\n## Later\n\nWritten by a person.\n"
    assert without_section(again) == HEAD + "\n\n## Later\n\nWritten by a person.\n"


def test_an_export_into_a_missing_file_is_the_section_alone(taught: MemoryStore, tmp_path: Path) -> None:
    new, diff = export_section(taught, PROJECT, tmp_path, "docs/AGENTS.md", chosen=[])
    assert new == render_section([]) and diff.startswith("--- a/docs/AGENTS.md\n+++ b/docs/AGENTS.md\n")
    (tmp_path / "NOTES.md").write_text("no newline at the end")
    assert export_section(taught, PROJECT, tmp_path, "NOTES.md", chosen=[])[0] == (
        "no newline at the end\n\n" + render_section([]))


@pytest.mark.parametrize("file", ["/etc/AGENTS.md", "../AGENTS.md", "docs/../../AGENTS.md"])
def test_a_file_outside_the_repository_is_refused(taught: MemoryStore, tmp_path: Path, file: str) -> None:
    with pytest.raises(InvalidMemory) as caught:
        export_section(taught, PROJECT, tmp_path, file)
    assert caught.value.code == "invalid_path"
