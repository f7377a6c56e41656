"""Selection beyond one similarity query: what a task is given besides the memories that best answer it.

    withheld = withheld_ids(store, project, guide.whole)   # in the prompt, manual, or scoped to files
    given = select(store, project, query, k=8, exclude=withheld.ids, repo_dir=tree)
    scope = FileScope.load(store, project, exclude=withheld.never_scoped)   # then, as files are opened:
    scope.matching("src/api/users.py")                          # the rules and memories scoped to it

- **Not given twice.** An instruction file the prompt already gives whole is
  not given again, passage by passage, as memories; a *manual* rule is given
  only when a person names it (``@name`` in the task), never by similarity.
- **Reserved slots.** Pitfalls and what people asked for (``pitfall`` and
  ``preference`` memories) keep :data:`RESERVED` of the ``k`` places when one
  is relevant at all (above retrieval's floor), so many similar conventions
  cannot crowd the one warning out.
- **Scoped to files.** A rule with ``globs``, a path-scoped ``AGENTS.md``
  section, a memory a person scoped to paths (``rule: globs`` in its
  provenance), and a memory that cites a file (``file:``/``line:`` citations)
  are matched against the files the agent opens.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import sqlalchemy as sa

from errand.memory.records import Kind, Memory, Recalled, Source, Status
from errand.memory.retrieve import retrieve
from errand.memory.rules import Activation
from errand.memory.schema import memories
from errand.memory.store import MemoryStore, memory_from_row

__all__ = ["RESERVED", "RESERVED_KINDS", "FileScope", "Withheld", "named_rules", "select", "withheld_ids"]

#: Places of the given set kept for pitfalls and preferences, when relevant ones exist.
RESERVED = 2
RESERVED_KINDS = (Kind.PITFALL, Kind.PREFERENCE)
#: Memories scoped to files that a round considers at most (the newest first).
MAX_SCOPED = 2_000
_GLOBS = "rule: globs "
_NAMED = re.compile(r"(?<![\w@])@([\w.-]+)")


@dataclass(frozen=True)
class Withheld:
    """Active memories the agent is not given by similarity, by why: the passages of instruction
    files the prompt already holds whole, manual rules, and whatever is scoped to files by ``globs``
    (given when those files are opened, as Cursor attaches such rules)."""

    in_prompt: frozenset[int] = frozenset()
    manual: frozenset[int] = frozenset()
    scoped: frozenset[int] = frozenset()

    @property
    def ids(self) -> frozenset[int]:
        return self.in_prompt | self.manual | self.scoped

    @property
    def never_scoped(self) -> frozenset[int]:
        """What opening a file must not show either."""
        return self.in_prompt | self.manual


def withheld_ids(store: MemoryStore, project: str, whole: Collection[str]) -> Withheld:
    """What of the project's memories is :class:`Withheld`, with the files in ``whole`` in the prompt."""
    query = (sa.select(memories.c.id, memories.c.source, memories.c.path, memories.c.detail)
             .where(memories.c.project == project, memories.c.status == Status.ACTIVE.value,
                    sa.or_(memories.c.source == Source.FILE.value, memories.c.detail.like(f"{_GLOBS}%"))))
    with store.engine.begin() as connection:
        rows = connection.execute(query).all()
    in_prompt, manual, scoped = set(), set(), set()
    for memory_id, source, path, detail in rows:
        mode = _mode(detail)
        if source == Source.FILE.value and path in whole:
            in_prompt.add(int(memory_id))
        elif mode == "manual":
            manual.add(int(memory_id))
        elif mode == "globs":
            scoped.add(int(memory_id))
    return Withheld(frozenset(in_prompt), frozenset(manual), frozenset(scoped))


def named_rules(store: MemoryStore, project: str, text: str) -> list[Memory]:
    """The manual rules ``text`` names as ``@name`` (a rule file's name without its suffix), in file order."""
    names = {name.lower() for name in _NAMED.findall(text)}
    if not names:
        return []
    found = store.list_memories(project, status=Status.ACTIVE, kind=Kind.INSTRUCTION, source=Source.FILE,
                                limit=100_000)
    return [memory for memory in reversed(found) if _mode(memory.provenance.detail) == "manual"
            and PurePosixPath(memory.provenance.path or "").stem.lower() in names]


def select(store: MemoryStore, project: str, query: str, k: int, *, exclude: Collection[int] = (),
           repo_dir: str | Path | None = None, reserved: int = RESERVED) -> list[Recalled]:
    """The ``k`` memories a task is given: the best answers to ``query``, with up to ``reserved``
    places kept for relevant pitfalls and preferences; best first."""
    # Excluded ids are dropped after candidates are drawn; draw more so they do not thin the field.
    candidates = 50 + min(len(exclude), 150)
    best = retrieve(store, project, query, k, repo_dir=repo_dir, exclude=exclude, candidates=candidates)
    if reserved <= 0 or k <= reserved:
        return best
    kept = retrieve(store, project, query, reserved, repo_dir=repo_dir, exclude=exclude, kinds=RESERVED_KINDS,
                    candidates=candidates)
    chosen = {item.memory.id for item in best}
    extra = [item for item in kept if item.memory.id not in chosen]
    if not extra:
        return best
    # The extras take the places of the lowest ranked others, never of a pitfall or preference.
    protected = [item for item in best if item.memory.kind in RESERVED_KINDS]
    others = [item for item in best if item.memory.kind not in RESERVED_KINDS]
    picked = protected + others[:max(0, k - len(protected) - len(extra))] + extra
    return sorted(picked, key=lambda item: (-item.score, item.memory.id))[:k]


@dataclass(frozen=True)
class _Scoped:
    memory_id: int
    activation: Activation | None
    files: frozenset[str]

    def applies_to(self, path: str) -> bool:
        return path in self.files or (self.activation is not None and self.activation.applies_to([path]))


class FileScope:
    """The project's memories scoped to files, matched against a path the agent opens.

    Only what matching needs is read when it loads (ids, activations, cited paths); a
    memory's row is read when a file it is scoped to is opened.
    """

    def __init__(self, scoped: Iterable[_Scoped] = (), store: MemoryStore | None = None) -> None:
        self._scoped = list(scoped)
        self._store = store

    @classmethod
    def load(cls, store: MemoryStore, project: str, *, exclude: Collection[int] = ()) -> FileScope:
        """Active memories with a ``globs`` activation or a cited file (instruction files' own
        passages first, in file order; then the rest, oldest first)."""
        cites = sa.cast(memories.c.citations, sa.Text)
        query = (sa.select(memories.c.id, memories.c.source, memories.c.detail, memories.c.citations)
                 .where(memories.c.project == project, memories.c.status == Status.ACTIVE.value,
                        sa.or_(memories.c.detail.like(f"{_GLOBS}%"), cites.like('%"file:%'),
                               cites.like('%"line:%')))
                 .order_by(memories.c.id.desc()).limit(MAX_SCOPED))
        with store.engine.begin() as connection:
            rows = connection.execute(query).all()
        scoped = []
        for memory_id, _source, detail, citations in sorted(rows, key=lambda row: (row[1] != Source.FILE.value,
                                                                                  row[0])):
            if memory_id in exclude:
                continue
            activation = Activation.from_detail(detail)
            globs = activation if activation is not None and activation.mode == "globs" else None
            files = frozenset(_cited_files(citations or ()))
            if globs is not None or files:
                scoped.append(_Scoped(int(memory_id), globs, files))
        return cls(scoped, store)

    def __len__(self) -> int:
        return len(self._scoped)

    def matching(self, path: str, *, skip: Collection[int] = (), limit: int | None = None) -> list[Memory]:
        """The memories scoped to ``path`` (relative to the repository root), in load order, but
        those in ``skip``; at most ``limit``."""
        ids = [item.memory_id for item in self._scoped if item.memory_id not in skip and item.applies_to(path)]
        ids = ids[:limit] if limit is not None else ids
        if not ids or self._store is None:
            return []
        with self._store.engine.begin() as connection:
            rows = {int(row["id"]): memory_from_row(row) for row in
                    connection.execute(sa.select(memories).where(memories.c.id.in_(ids))).mappings()}
        return [rows[memory_id] for memory_id in ids if memory_id in rows]


def _cited_files(citations: Iterable[str]) -> Iterable[str]:
    for citation in citations:
        kind, _, value = citation.partition(":")
        if kind == "file":
            yield value
        elif kind == "line":
            yield value.rpartition(":")[0]


def _mode(detail: str | None) -> str | None:
    activation = Activation.from_detail(detail)
    return activation.mode if activation is not None else None
