"""Rules with activation modes, as people already write them, and which of them apply to the files at hand.

Cursor's ``.cursor/rules/*.mdc`` files open with front matter that says when a
rule applies::

    ---
    description: How API handlers validate input
    globs: src/api/**/*.py, tests/api/**
    alwaysApply: false
    ---

``alwaysApply: true`` → **always** (given to every task); ``globs`` → **when
those files are open** (auto-attached); a ``description`` alone → **on request**
(the agent finds it by what it is about: ordinary retrieval); none of these →
**manual** (only when a person names it). An ``AGENTS.md`` or ``CLAUDE.md``
below the repository root is scoped the same way to its own folder.

:func:`parse_rule` splits a rule file into its :class:`Activation` and its
body; ingestion keeps the activation in each passage's provenance detail
(``rule: always``, ``rule: globs src/api/**/*.py``, …), and :func:`rules_for`
reads it back: the memories that must be given for a set of paths, whatever a
similarity search would rank.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from errand.memory.records import Kind, Memory, Source, Status
from errand.memory.store import MemoryStore

__all__ = ["RULES_DIR", "Activation", "parse_rule", "rule_files", "rules_for", "scoped_activation"]

_FRONT_MATTER = re.compile(r"\A---[ \t]*\n((?:.*?\n)?)---[ \t]*(?:\n|\Z)", re.DOTALL)
_PREFIX = "rule: "
#: Where Cursor keeps a project's rule files (``*.mdc``, and plain ``*.md``), at any depth below.
RULES_DIR = ".cursor/rules/"
MAX_RULE_FILES = 500


@dataclass(frozen=True)
class Activation:
    mode: str  # "always", "globs", "requested" or "manual"
    globs: tuple[str, ...] = ()
    description: str = ""

    def detail(self) -> str:
        """How the mode is kept in a memory's provenance detail."""
        if self.mode == "globs":
            return f"{_PREFIX}globs {', '.join(self.globs)}"
        if self.mode == "requested":
            return f"{_PREFIX}requested: {self.description}"
        return f"{_PREFIX}{self.mode}"

    @classmethod
    def from_detail(cls, detail: str | None) -> Activation | None:
        if not detail or not detail.startswith(_PREFIX):
            return None
        rest = detail[len(_PREFIX):]
        if rest.startswith("globs "):
            return cls("globs", tuple(part.strip() for part in rest[6:].split(",") if part.strip()))
        if rest.startswith("requested: "):
            return cls("requested", description=rest[len("requested: "):])
        return cls(rest) if rest in ("always", "manual") else None

    def applies_to(self, paths: Iterable[str]) -> bool:
        if self.mode == "always":
            return True
        # fnmatch's `*` crosses `/`, so `src/**/*.py` and `src/*.py` both take files at any depth below src/.
        return self.mode == "globs" and any(fnmatch.fnmatch(path, pattern.replace("**/", "*").replace("**", "*"))
                                            for path in paths for pattern in self.globs)


def parse_rule(text: str) -> tuple[Activation | None, str]:
    """The activation a rule file's front matter declares (None without front matter) and its body."""
    found = _FRONT_MATTER.match(text)
    if found is None:
        return None, text
    fields: dict[str, str] = {}
    for line in found.group(1).splitlines():
        key, colon, value = line.partition(":")
        if colon:
            fields[key.strip().lower()] = value.strip().strip("'\"")
    body = text[found.end():]
    globs = tuple(part.strip().strip("'\"") for part in fields.get("globs", "").strip("[]").split(",")
                  if part.strip().strip("'\""))
    if fields.get("alwaysapply", "").lower() == "true":
        return Activation("always"), body
    if globs:
        return Activation("globs", globs), body
    if fields.get("description"):
        return Activation("requested", description=fields["description"]), body
    return Activation("manual"), body


def rule_files(repo: Path) -> list[str]:
    """The rule files below ``.cursor/rules/`` (not followed if that folder is a symlink), as sorted
    relative POSIX paths; at most :data:`MAX_RULE_FILES`."""
    folder = repo / RULES_DIR
    if not folder.is_dir() or folder.is_symlink():
        return []
    found = sorted(path.relative_to(repo).as_posix() for path in folder.rglob("*")
                   if path.suffix in (".md", ".mdc") and path.is_file())
    return found[:MAX_RULE_FILES]


def scoped_activation(relative: str) -> Activation | None:
    """An AGENTS.md or CLAUDE.md below the root applies to its own folder; a root one to everything."""
    parent = PurePosixPath(relative).parent
    return None if str(parent) == "." else Activation("globs", (f"{parent}/**",))


def rules_for(store: MemoryStore, project: str, paths: Iterable[str]) -> list[Memory]:
    """The project's active instruction memories that apply to ``paths`` by their rule's activation
    (always-apply rules, and rules whose globs match one of the paths), in the files' order."""
    wanted = list(paths)
    found = store.list_memories(project, status=Status.ACTIVE, kind=Kind.INSTRUCTION, source=Source.FILE,
                                limit=100_000)
    chosen = []
    for memory in reversed(found):  # oldest first: the order the passages were read in
        activation = Activation.from_detail(memory.provenance.detail)
        if activation is not None and activation.applies_to(wanted):
            chosen.append(memory)
    return chosen
