"""Knowledge stays with the team: the approved memories, written into a reviewable section of AGENTS.md.

    new_text, diff = export_section(store, project, repo_dir)         # AGENTS.md unless another file is named

What the project taught errand (commands that work, conventions, pitfalls,
what reviewers want) should not live only in errand's database. The export is
a section between two marker comments in the instruction file, grouped by
kind, one line per active memory with its id; everything outside the markers
is left as it was, and a second export replaces the section rather than adding
another. The result comes back as a unified diff for a person to read and
apply (``errand memory export`` prints it; ``--write`` writes the file).

Memories that came *from* an instruction file are left out (they are already
written down), and :func:`~errand.memory.ingest.passages` skips the section, so
syncing the file afterwards does not read the export back in as instructions.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path

from errand.memory.errors import InvalidMemory
from errand.memory.records import Kind, Memory, Source, Status
from errand.memory.store import MemoryStore

__all__ = ["BEGIN", "END", "export_section", "exported_memories", "render_section", "without_section"]

BEGIN = "<!-- errand:memories:begin (written by `errand memory export`; edits here are replaced) -->"
END = "<!-- errand:memories:end -->"
_SECTION = re.compile(r"<!-- errand:memories:begin\b.*?-->.*?<!-- errand:memories:end -->\n?", re.DOTALL)
_TITLES = {Kind.COMMAND: "Commands that work", Kind.CONVENTION: "Conventions", Kind.PITFALL: "Pitfalls",
           Kind.PREFERENCE: "What reviewers want", Kind.FACT: "Facts", Kind.INSTRUCTION: "Instructions"}
MAX_EXPORTED = 500


def render_section(memories: list[Memory]) -> str:
    """The marked section for these memories (kinds in a fixed order, oldest first within a kind)."""
    lines = [BEGIN, "## What errand learned about this project", ""]
    for kind, title in _TITLES.items():
        mine = sorted((memory for memory in memories if memory.kind is kind), key=lambda memory: memory.id)
        if mine:
            lines += [f"### {title}", "", *(f"- {_one_line(memory.text)} (memory {memory.id})" for memory in mine), ""]
    return "\n".join([*lines, END]) + "\n"


def without_section(text: str) -> str:
    """``text`` with the exported section taken out (what ingestion reads)."""
    return _SECTION.sub("", text)


def exported_memories(store: MemoryStore, project: str) -> list[Memory]:
    """What an export writes: the project's active memories that did not come from an instruction file."""
    return [memory for memory in store.list_memories(project, status=Status.ACTIVE, limit=MAX_EXPORTED)
            if memory.provenance.source is not Source.FILE]


def export_section(store: MemoryStore, project: str, repo_dir: str | Path, file: str = "AGENTS.md", *,
                   chosen: list[Memory] | None = None) -> tuple[str, str]:
    """The file's new text with the section written in (of ``chosen``, by default
    :func:`exported_memories`), and the unified diff from the current text."""
    if Path(file).is_absolute() or ".." in Path(file).parts:
        raise InvalidMemory(f"the export goes into a file inside the repository, not {file!r}", code="invalid_path")
    path = Path(repo_dir) / file
    old = path.read_text(encoding="utf-8") if path.is_file() else ""
    section = render_section(exported_memories(store, project) if chosen is None else chosen)
    if _SECTION.search(old):
        new = _SECTION.sub(lambda _: section, old, count=1)
    else:
        new = old + ("\n" if old and not old.endswith("\n") else "") + ("\n" if old else "") + section
    diff = "".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                        fromfile=f"a/{file}", tofile=f"b/{file}"))
    return new, diff


def _one_line(text: str) -> str:
    # A memory is one statement; in a Markdown list item a line break would end the item.
    return re.sub(r"\s+", " ", text).strip()
