"""Instruction files as memories, kept in step with the files.

:func:`sync_instructions` reads the project's instruction files (AGENTS.md,
CLAUDE.md, ``.cursorrules``, ``.cursor/rules/``, ``.windsurfrules``,
``.github/copilot-instructions.md``, CONTRIBUTING…), splits each into passages
(a paragraph or list item, with its section heading in front) and makes each
passage an active ``instruction`` memory whose provenance is the file's path
and content hash. Run again, it compares passages:

- a passage still there is kept (its provenance moves to the new hash);
- a passage that changed is stored anew and **supersedes** the old one;
- a passage, or a whole file, that is gone is **archived** (``source_removed``).

A passage that looks like a secret is skipped and counted, never stored.
Files are read only when they are regular files inside the repository (a
symlink pointing out of it is not followed).
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from errand._files import read_inside
from errand.memory.errors import SecretRefused
from errand.memory.export import without_section
from errand.memory.records import ArchiveReason, Kind, Memory, Provenance, Source, Status
from errand.memory.rules import RULES_DIR, parse_rule, rule_files, scoped_activation
from errand.memory.schema import memories
from errand.memory.store import MemoryStore
from errand.memory.text import MAX_TEXT_CHARS, likeness

__all__ = ["INSTRUCTION_FILES", "SyncReport", "instruction_files", "passages", "sync_instructions"]

#: Looked for relative to the repository root; ``.cursor/rules/`` means every rule file below that folder.
INSTRUCTION_FILES: tuple[str, ...] = (
    "AGENTS.md", "CLAUDE.md", ".cursorrules", ".cursor/rules/", ".windsurfrules", ".github/copilot-instructions.md",
    "CONTRIBUTING.md", "CONTRIBUTING.rst", "CONTRIBUTING.txt", "CONTRIBUTING", ".github/CONTRIBUTING.md",
    "docs/CONTRIBUTING.md",
)
MAX_FILE_BYTES = 256 * 1024
MIN_PASSAGE_CHARS = 12
#: How alike a new passage must be to a vanished one to count as its new version (superseding it).
CHANGED_LIKENESS = 0.4


@dataclass
class SyncReport:
    """What one :func:`sync_instructions` did, by memory id (``refused`` counts skipped secret passages)."""

    added: list[int] = field(default_factory=list)
    kept: list[int] = field(default_factory=list)
    superseded: list[tuple[int, int]] = field(default_factory=list)  # (old id, new id)
    archived: list[int] = field(default_factory=list)
    refused: int = 0
    files: list[str] = field(default_factory=list)


def instruction_files(repo_dir: Path) -> list[str]:
    """The instruction files present in the repository, as relative POSIX paths."""
    repo = repo_dir.resolve()
    found: list[str] = []
    for name in INSTRUCTION_FILES:
        if name == RULES_DIR:
            found.extend(rule_files(repo))
        elif (repo / name).is_file():
            found.append(name)
    return list(dict.fromkeys(found + _scoped_files(repo)))


#: Instruction files that also count below the root, scoped to their folder.
SCOPED_FILES = ("AGENTS.md", "CLAUDE.md")
_SKIP_DIRS = frozenset({".git", "node_modules", ".venv", "venv", "__pycache__", "target", "dist", "build", ".tox"})
MAX_SCOPED_DIRS = 5_000


def _scoped_files(repo: Path) -> list[str]:
    found: list[str] = []
    seen = 0
    for directory, subdirectories, files in os.walk(repo):
        subdirectories[:] = sorted(name for name in subdirectories if name not in _SKIP_DIRS)
        seen += 1
        if seen > MAX_SCOPED_DIRS:
            break
        if Path(directory) == repo:
            continue
        found.extend(Path(directory, name).relative_to(repo).as_posix() for name in SCOPED_FILES if name in files)
    return found


def passages(text: str) -> list[str]:
    """The passages of a Markdown-ish document: paragraphs and list items, each prefixed with its heading
    (the section ``errand memory export`` wrote is not read back)."""
    heading = ""
    found: list[str] = []
    block: list[str] = []
    fenced = False

    def flush() -> None:
        body = re.sub(r"\s+", " ", " ".join(block)).strip()
        block.clear()
        if len(body) >= MIN_PASSAGE_CHARS:
            found.append((f"{heading}: {body}" if heading else body)[:MAX_TEXT_CHARS])

    for line in without_section(text).splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            if not fenced:
                flush()  # a command block ends its passage (with the lead-in it belongs to)
            continue
        if fenced:
            block.append(f"`{line.strip()}`" if line.strip() else "")
            continue
        title = re.match(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$", line)
        if title or line.strip().startswith("---"):
            flush()
            heading = title.group(1).strip() if title else heading
        elif not line.strip():
            # "Run the tests with:" then a blank line then the fenced command: one passage, not a
            # lead-in without its command and a command too short to keep.
            if not (block and block[-1].rstrip().endswith(":")):
                flush()
        elif re.match(r"^\s*(?:[*+-]|\d+[.)])\s+", line):
            flush()
            block.append(re.sub(r"^\s*(?:[*+-]|\d+[.)])\s+", "", line))
        else:
            block.append(line.strip())
    flush()
    return list(dict.fromkeys(found))


def sync_instructions(store: MemoryStore, project: str, repo_dir: str | Path) -> SyncReport:
    """Bring the project's instruction-file memories in step with the files in ``repo_dir``."""
    repo = Path(repo_dir).resolve()
    report = SyncReport(files=instruction_files(repo))
    read = set()
    for relative in report.files:
        data = _read_inside(repo, relative)
        if data is not None:
            read.add(relative)
            _sync_file(store, project, relative, data, report)
    for path in _tracked_paths(store, project):
        if path not in read:
            for memory in _live(store, project, path):
                report.archived.append(store.archive(memory.id, ArchiveReason.SOURCE_REMOVED).id)
    return report


def _sync_file(store: MemoryStore, project: str, path: str, data: bytes, report: SyncReport) -> None:
    content_hash = "sha256:" + hashlib.sha256(data).hexdigest()
    activation, body = parse_rule(data.decode("utf-8", errors="replace"))
    activation = activation or scoped_activation(path)
    detail = activation.detail() if activation is not None else None
    provenance = Provenance(Source.FILE, path=path, content_hash=content_hash, detail=detail)
    new = passages(body)
    if activation is not None and activation.mode == "requested":
        # A rule given on request is found by what it is about: its description goes with each passage.
        new = list(dict.fromkeys(text if text.startswith(activation.description) else
                                 f"{activation.description}: {text}"[:MAX_TEXT_CHARS] for text in new))
    old = {memory.text: memory for memory in _live(store, project, path)}
    vanished = [memory for text, memory in old.items() if text not in new]
    for text in new:
        existing = old.get(text)
        if existing is not None:
            _rehash(store, existing, content_hash, detail)
            report.kept.append(existing.id)
            continue
        before = _closest(text, vanished)
        try:
            added = store.add(project, text, kind=Kind.INSTRUCTION, provenance=provenance, status=Status.ACTIVE,
                              supersedes=before.id if before else None, merge=False)
        except SecretRefused:
            report.refused += 1
            continue
        if before is not None:
            vanished.remove(before)
            report.superseded.append((before.id, added.id))
        else:
            report.added.append(added.id)
    for memory in vanished:
        report.archived.append(store.archive(memory.id, ArchiveReason.SOURCE_REMOVED).id)


def _closest(text: str, candidates: list[Memory]) -> Memory | None:
    scored = [(likeness(text, memory.text), memory) for memory in candidates]
    best = max(scored, key=lambda pair: pair[0], default=None)
    return best[1] if best is not None and best[0] >= CHANGED_LIKENESS else None


def _live(store: MemoryStore, project: str, path: str) -> list[Memory]:
    found = store.list_memories(project, source=Source.FILE, path=path, limit=100_000)
    return [memory for memory in reversed(found) if memory.status is not Status.ARCHIVED]


def _tracked_paths(store: MemoryStore, project: str) -> list[str]:
    query = (memories.select().with_only_columns(memories.c.path).distinct()
             .where(memories.c.project == project, memories.c.source == Source.FILE.value,
                    memories.c.status != Status.ARCHIVED.value))
    with store.engine.begin() as connection:
        return sorted(str(path) for path in connection.execute(query).scalars() if path)


def _rehash(store: MemoryStore, memory: Memory, content_hash: str, detail: str | None) -> None:
    if memory.provenance.content_hash == content_hash and memory.provenance.detail == detail:
        return
    with store.engine.begin() as connection:
        connection.execute(memories.update().where(memories.c.id == memory.id)
                           .values(content_hash=content_hash, detail=detail))


def _read_inside(repo: Path, relative: str) -> bytes | None:
    """The file's bytes (at most MAX_FILE_BYTES) if it is a regular file inside ``repo``, else None."""
    read = read_inside(repo, relative, MAX_FILE_BYTES)
    return None if read is None else read[0]
