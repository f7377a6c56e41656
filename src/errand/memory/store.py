"""The memory store: memories with their provenance, in the task store's SQL database.

Every method is one short transaction. :meth:`MemoryStore.add` is where the
correctness rules live: a text that looks like a secret is refused before
anything is written; an exact or near duplicate of a memory the project
already has is merged into it (its evidence count goes up, it keeps the first
provenance), and a duplicate of a memory a person rejected stays rejected; a
memory may name one it supersedes, which is archived and linked both ways.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Self

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from errand.database import SqlStore, open_engine
from errand.memory import citations as citing
from errand.memory.conflicts import conflict
from errand.memory.embedders import Embedder, default_embedder
from errand.memory.errors import InvalidMemory, MemoryNotFound
from errand.memory.records import ArchiveReason, Kind, Memory, Provenance, Source, Status
from errand.memory.schema import memories, memory_projects, memory_uses
from errand.memory.secretscan import check_no_secret
from errand.memory.text import MAX_TEXT_CHARS, fingerprint, has_lone_surrogate, likeness

if TYPE_CHECKING:  # the lexical index (NumPy) is imported when it is first searched
    from errand.memory.lexical import ProjectIndex

__all__ = ["DUPLICATE_LIKENESS", "MemoryStore", "memory_from_row"]

#: Content-word Jaccard at or above which a new memory is merged into an old one.
DUPLICATE_LIKENESS = 0.75
_UNSET: Any = object()
_USE_KINDS = ("given", "recalled", "used")
_WORD_BATCH = 200


class MemoryStore(SqlStore):
    """Project memories in one SQL database (the task store's).

    ``embedder`` defaults to :func:`~errand.memory.embedders.default_embedder`;
    pass ``None`` for lexical (BM25) retrieval alone.
    """

    def __init__(self, engine: sa.Engine, *, embedder: Embedder | None = _UNSET) -> None:
        super().__init__(engine)
        self.embedder: Embedder | None = default_embedder() if embedder is _UNSET else embedder
        self._vectors: Any = None
        self._words: Any = None
        self._bm25: dict[str, ProjectIndex] = {}
        self._fts5: bool | None = None

    @classmethod
    def open(cls, url: str | None = None, *, embedder: Embedder | None = _UNSET) -> Self:
        """Open (creating and migrating) the database at ``url``; by default errand's own ``errand.db``."""
        return cls(open_engine(url), embedder=embedder)

    # -- adding ------------------------------------------------------------------------

    def add(
        self, project: str, text: str, *, kind: Kind | str, provenance: Provenance,
        status: Status | str = Status.ACTIVE, confidence: float = 1.0, supersedes: int | None = None,
        merge: bool = True,
    ) -> Memory:
        """Store a memory, or merge it into the near-duplicate the project already has; return the result.

        Raises :class:`~errand.memory.SecretRefused` for text that looks like a
        secret and :class:`~errand.memory.InvalidMemory` for bad input; either
        way nothing is written. ``merge=False`` skips duplicate detection (used
        by ingestion, which tracks its passages itself).
        """
        text, kind, status = _checked(text, kind, status, confidence)
        embedded = self._new_word_vectors([text])
        with self._write() as connection:
            if embedded:
                self.words().write(connection, embedded)
            if merge and supersedes is None:
                duplicate = self._duplicate(connection, project, text)
                if duplicate is not None:
                    return self._merge(connection, duplicate, status, confidence)
            memory_id = self._insert(connection, project, text, kind, provenance, status, confidence)
            if supersedes is not None:
                self._supersede(connection, project, supersedes, memory_id)
            self._bump(connection, project)
            return memory_from_row(_row(connection, memory_id))

    def _insert(
        self, connection: sa.Connection, project: str, text: str, kind: Kind, provenance: Provenance,
        status: Status, confidence: float,
    ) -> int:
        now = time.time()
        inserted = connection.execute(memories.insert().values(
            project=project, kind=kind.value, text=text, status=status.value, source=provenance.source.value,
            task_id=provenance.task_id, event_id=provenance.event_id, path=provenance.path,
            content_hash=provenance.content_hash, commit=provenance.commit, detail=provenance.detail,
            confidence=confidence, created_at=now, updated_at=now, last_used_at=None, use_count=0, evidence=1,
            fingerprint=fingerprint(text), citations=list(citing.extract(text)),
        ))
        key = inserted.inserted_primary_key
        assert key is not None
        memory_id = int(key[0])
        if self.embedder is not None:
            self.vectors().write(connection, project, [(memory_id, text)])
        return memory_id

    def _duplicate(self, connection: sa.Connection, project: str, text: str) -> sa.RowMapping | None:
        """The live (or rejected) memory ``text`` repeats, exactly or nearly, if there is one."""
        eligible = sa.or_(memories.c.status != Status.ARCHIVED.value,
                          memories.c.archived_reason == ArchiveReason.REJECTED.value)
        exact = connection.execute(
            sa.select(memories).where(memories.c.project == project, memories.c.fingerprint == fingerprint(text),
                                      eligible).order_by(memories.c.id).limit(1)
        ).mappings().first()
        if exact is not None:
            return exact
        statuses = [status.value for status in Status]
        for memory_id, _score in self._candidates(connection, project, text, statuses, limit=10):
            row = _row(connection, memory_id)
            if (row["status"] != Status.ARCHIVED.value or row["archived_reason"] == ArchiveReason.REJECTED.value) \
                    and likeness(text, row["text"]) >= DUPLICATE_LIKENESS and conflict(text, row["text"]) is None:
                return row
        return None

    def _merge(self, connection: sa.Connection, row: sa.RowMapping, status: Status, confidence: float) -> Memory:
        values: dict[str, Any] = {
            "evidence": memories.c.evidence + 1, "updated_at": time.time(),
            "confidence": max(float(row["confidence"]), confidence),
        }
        # Observed again as fact: a proposal it repeats is confirmed. A rejected one stays rejected.
        if status is Status.ACTIVE and row["status"] == Status.PROPOSED.value:
            values["status"] = Status.ACTIVE.value
        connection.execute(memories.update().where(memories.c.id == row["id"]).values(**values))
        if "status" in values:  # the caches hold statuses, not evidence or confidence
            self._bump(connection, row["project"])
        return memory_from_row(_row(connection, row["id"]))

    def _supersede(self, connection: sa.Connection, project: str, old_id: int, new_id: int) -> None:
        old = _row(connection, old_id)
        if old["project"] != project:
            raise InvalidMemory(f"memory {old_id} belongs to another project; it cannot be superseded from this one",
                                memory_id=old_id)
        connection.execute(memories.update().where(memories.c.id == old_id).values(
            status=Status.ARCHIVED.value, archived_reason=ArchiveReason.SUPERSEDED.value, superseded_by=new_id,
            updated_at=time.time(),
        ))
        connection.execute(memories.update().where(memories.c.id == new_id).values(supersedes=old_id))

    # -- reading -----------------------------------------------------------------------

    def get(self, memory_id: int) -> Memory:
        with self._read() as connection:
            return memory_from_row(_row(connection, memory_id))

    def list_memories(
        self, project: str | None = None, *, status: Status | str | None = None, kind: Kind | str | None = None,
        source: Source | str | None = None, path: str | None = None, limit: int = 100, offset: int = 0,
    ) -> list[Memory]:
        """Memories newest first, filtered by whichever of the arguments are given."""
        query = sa.select(memories).order_by(memories.c.id.desc()).limit(limit).offset(offset)
        for column, value in (("project", project), ("status", status and Status(status).value),
                              ("kind", kind and Kind(kind).value), ("source", source and Source(source).value),
                              ("path", path)):
            if value is not None:
                query = query.where(memories.c[column] == value)
        with self._read() as connection:
            return [memory_from_row(row) for row in connection.execute(query).mappings()]

    def projects(self) -> list[str]:
        with self._read() as connection:
            return list(connection.execute(sa.select(memory_projects.c.project).order_by("project")).scalars())

    # -- changing ----------------------------------------------------------------------

    def edit(self, memory_id: int, *, text: str | None = None, kind: Kind | str | None = None,
             confidence: float | None = None, note: str | None = None) -> Memory:
        """Change a memory's text, kind or confidence (a person's correction); its provenance stays,
        with ``note`` (why it changed, such as a model's consolidation reason) added to its detail."""
        embedded = self._new_word_vectors([text]) if text is not None else []
        with self._write() as connection:
            row = _row(connection, memory_id)
            new_text, new_kind, _ = _checked(text if text is not None else row["text"],
                                             kind if kind is not None else row["kind"], row["status"],
                                             confidence if confidence is not None else row["confidence"])
            connection.execute(memories.update().where(memories.c.id == memory_id).values(
                text=new_text, kind=new_kind.value, updated_at=time.time(), fingerprint=fingerprint(new_text),
                citations=list(citing.extract(new_text)),
                confidence=confidence if confidence is not None else row["confidence"],
                detail=_noted(row["detail"], note),
            ))
            if self.embedder is not None and new_text != row["text"]:
                self.vectors().write(connection, row["project"], [(memory_id, new_text)])
                self.words().write(connection, embedded)
            self._bump(connection, row["project"])
            return memory_from_row(_row(connection, memory_id))

    def approve(self, memory_id: int) -> Memory:
        """proposed → active."""
        return self._move(memory_id, {Status.PROPOSED}, Status.ACTIVE, None)

    def reject(self, memory_id: int) -> Memory:
        """proposed → archived (rejected). Kept, so the same proposal is never made active again."""
        return self._move(memory_id, {Status.PROPOSED}, Status.ARCHIVED, ArchiveReason.REJECTED)

    def archive(self, memory_id: int, reason: ArchiveReason = ArchiveReason.ARCHIVED) -> Memory:
        """proposed or active → archived: no longer given to agents, still listed."""
        return self._move(memory_id, {Status.PROPOSED, Status.ACTIVE}, Status.ARCHIVED, reason)

    def remove(self, memory_id: int) -> Memory:
        """Delete a memory for good (its vectors and use records with it); returns what was deleted."""
        with self._write() as connection:
            memory = memory_from_row(_row(connection, memory_id))
            connection.execute(memories.update().where(memories.c.supersedes == memory_id).values(supersedes=None))
            connection.execute(memories.update().where(memories.c.superseded_by == memory_id)
                               .values(superseded_by=None))
            connection.execute(memories.delete().where(memories.c.id == memory_id))
            self._bump(connection, memory.project)
            return memory

    def _move(self, memory_id: int, allowed: set[Status], target: Status, reason: ArchiveReason | None) -> Memory:
        with self._write() as connection:
            row = _row(connection, memory_id)
            current = Status(row["status"])
            if current not in allowed:
                raise InvalidMemory(
                    f"memory {memory_id} is {current}; only a {' or '.join(sorted(allowed))} memory can become "
                    f"{reason or target}", memory_id=memory_id, code="illegal_status",
                )
            connection.execute(memories.update().where(memories.c.id == memory_id).values(
                status=target.value, archived_reason=reason.value if reason else None, updated_at=time.time(),
            ))
            self._bump(connection, row["project"])
            return memory_from_row(_row(connection, memory_id))

    # -- uses ----------------------------------------------------------------------------

    def record_use(self, task_id: str, memory_ids: Sequence[int], how: str = "given") -> None:
        """Record that a task was ``given`` memories (in its context), ``recalled`` them (through the recall
        tool) or ``used`` them (said it relied on them). Recalled and used ones count towards ranking."""
        if how not in _USE_KINDS:
            raise InvalidMemory(f"how must be one of {', '.join(_USE_KINDS)}, not {how!r}", code="invalid_use")
        ids = list(dict.fromkeys(memory_ids))
        if not ids:
            return
        now = time.time()
        with self._write() as connection:
            found = connection.execute(sa.select(memories.c.id, memories.c.project)
                                       .where(memories.c.id.in_(ids))).all()
            missing = set(ids) - {row[0] for row in found}
            if missing:
                raise MemoryNotFound(f"no memory has id {min(missing)}", memory_id=min(missing))
            connection.execute(memory_uses.insert(), [
                {"memory_id": memory_id, "task_id": task_id, "how": how, "time": now} for memory_id in ids
            ])
            if how != "given":
                # No generation bump: use counts feed no cache, and a bump would make the next
                # search re-read every vector of the project.
                connection.execute(memories.update().where(memories.c.id.in_(ids))
                                   .values(use_count=memories.c.use_count + 1, last_used_at=now))

    def use_counts(self, memory_ids: Sequence[int]) -> dict[int, dict[str, int]]:
        """Per memory, how many tasks were given it, recalled it and said they used it (the
        ``use_count`` ranking signal counts only the last two, each time)."""
        ids = list(dict.fromkeys(memory_ids))
        if not ids:
            return {}
        query = (sa.select(memory_uses.c.memory_id, memory_uses.c.how,
                           sa.func.count(sa.distinct(memory_uses.c.task_id)))
                 .where(memory_uses.c.memory_id.in_(ids)).group_by(memory_uses.c.memory_id, memory_uses.c.how))
        counts: dict[int, dict[str, int]] = {}
        with self._read() as connection:
            for memory_id, how, tasks in connection.execute(query):
                counts.setdefault(int(memory_id), {})[str(how)] = int(tasks)
        return counts

    def uses(self, task_id: str) -> list[tuple[Memory, str]]:
        """The memories a task was given, recalled or used, in the order recorded, with how."""
        query = (sa.select(memories, memory_uses.c.how).join(memory_uses, memory_uses.c.memory_id == memories.c.id)
                 .where(memory_uses.c.task_id == task_id).order_by(memory_uses.c.id))
        with self._read() as connection:
            return [(memory_from_row(row), str(row["how"])) for row in connection.execute(query).mappings()]

    # -- search primitives (used by retrieval) -----------------------------------------------

    def generation(self, connection: sa.Connection, project: str) -> int:
        found = connection.execute(
            sa.select(memory_projects.c.generation).where(memory_projects.c.project == project)
        ).scalar()
        return int(found or 0)

    def lexical(self, connection: sa.Connection, project: str, query: str, statuses: Sequence[str],
                limit: int) -> list[tuple[int, float]]:
        """BM25 over the project's memories, with the project's own statistics (:class:`ProjectIndex`)."""
        return self.lexical_index(connection, project).search(query, statuses, limit)

    def lexical_index(self, connection: sa.Connection, project: str, generation: int | None = None) -> ProjectIndex:
        """The project's BM25 index, rebuilt (reusing unchanged memories' terms) when its generation
        (read here unless the caller has it) moved."""
        from errand.memory.lexical import ProjectIndex

        generation = self.generation(connection, project) if generation is None else generation
        index = self._bm25.get(project)
        if index is None or index.generation != generation:
            index = self._bm25[project] = ProjectIndex.build(connection, project, generation, index)
        return index

    def _candidates(self, connection: sa.Connection, project: str, text: str, statuses: Sequence[str],
                    limit: int) -> list[tuple[int, float]]:
        """A few memories sharing words with ``text``: FTS5 on SQLite (no index rebuild on each add),
        the project's index elsewhere."""
        from errand.memory.lexical import fts5_available, fts5_search

        if self._fts5 is None:
            self._fts5 = fts5_available(connection)
        if self._fts5:
            return fts5_search(connection, project, text, statuses, limit)
        return self.lexical(connection, project, text, statuses, limit)

    def vectors(self) -> Any:
        """The :class:`~errand.memory.vectors.VectorIndex` of this store's embedder (imported on first use)."""
        if self.embedder is None:
            raise InvalidMemory("this memory store has no embedder", code="no_embedder")
        if self._vectors is None:
            from errand.memory.vectors import VectorIndex

            self._vectors = VectorIndex(self.embedder)
        return self._vectors

    def words(self) -> Any:
        """The :class:`~errand.memory.words.WordVectors` of this store's embedder (imported on first use)."""
        if self.embedder is None:
            raise InvalidMemory("this memory store has no embedder", code="no_embedder")
        if self._words is None:
            from errand.memory.words import WordVectors

            self._words = WordVectors(self.embedder)
        return self._words

    def backfill_vectors(self, project: str, progress: Callable[[int, int], object] | None = None) -> int:
        """Embed the project's memories that have no vector from the current embedder, and the words of
        its memories that have none; returns how many memories. ``progress(done, total)`` is told after
        each batch of words (a word takes e5 about as long as a short query: 12,000 take minutes)."""
        if self.embedder is None:
            return 0
        with self._write() as connection:
            missing = self.vectors().missing(connection, project)
            self.vectors().write(connection, project, missing)
            if missing:
                self._bump(connection, project)
        self._backfill_words(project, progress)
        return len(missing)

    def _backfill_words(self, project: str, progress: Callable[[int, int], object] | None) -> None:
        with self._read() as connection:
            texts = list(connection.execute(sa.select(memories.c.text).where(memories.c.project == project))
                         .scalars())
            new = self.words().new_words(connection, texts)
        # In batches, each its own transaction: an interrupted backfill keeps what it made.
        for start in range(0, len(new), _WORD_BATCH):
            embedded = self.words().embed(new[start:start + _WORD_BATCH])
            with self._write() as connection:
                self.words().write(connection, embedded)
            if progress is not None:
                progress(min(start + _WORD_BATCH, len(new)), len(new))

    def _new_word_vectors(self, texts: Sequence[str]) -> list[tuple[str, bytes]]:
        """The vectors of the words of ``texts`` the store has none for, made before the write
        transaction (the model takes ~20 ms a word; the write lock is held for none of it)."""
        if self.embedder is None:
            return []
        with self._read() as connection:
            new = self.words().new_words(connection, texts)
        return list(self.words().embed(new))

    # -- plumbing ------------------------------------------------------------------------------

    def _bump(self, connection: sa.Connection, project: str) -> None:
        # One statement (an upsert), not "update, and insert if nothing was": two workers writing
        # a new project's first memories at once both found nothing and one insert failed.
        insert = (postgresql.insert if connection.dialect.name == "postgresql" else sqlite.insert)(memory_projects)
        connection.execute(insert.values(project=project, generation=1).on_conflict_do_update(
            index_elements=[memory_projects.c.project], set_={"generation": memory_projects.c.generation + 1}))



def _checked(text: str, kind: Kind | str, status: Status | str, confidence: float) -> tuple[str, Kind, Status]:
    text = text.strip()
    if not text:
        raise InvalidMemory("a memory needs some text", code="empty_memory")
    if has_lone_surrogate(text):
        # It cannot be stored (no database encoding holds it): say so, rather than fail while writing.
        raise InvalidMemory("the text holds a lone UTF-16 surrogate (broken Unicode); send it as valid UTF-8",
                            code="invalid_text")
    if len(text) > MAX_TEXT_CHARS:
        raise InvalidMemory(f"a memory is at most {MAX_TEXT_CHARS} characters (this one has {len(text)}); "
                            "store one statement, not a document", code="memory_too_long")
    try:
        kind, status = Kind(kind), Status(status)
    except ValueError as error:
        raise InvalidMemory(f"{error}; kinds are {', '.join(Kind)}, statuses {', '.join(Status)}") from None
    if not 0.0 <= confidence <= 1.0:
        raise InvalidMemory(f"confidence is between 0 and 1, not {confidence}")
    check_no_secret(text)
    return text, kind, status


def _noted(detail: str | None, note: str | None) -> str | None:
    if not note:
        return detail
    return f"{detail}; {note}" if detail else note


def _row(connection: sa.Connection, memory_id: int) -> sa.RowMapping:
    row = connection.execute(sa.select(memories).where(memories.c.id == memory_id)).mappings().first()
    if row is None:
        raise MemoryNotFound(f"no memory has id {memory_id}", memory_id=memory_id)
    return row


def memory_from_row(row: sa.RowMapping) -> Memory:
    provenance = Provenance(
        Source(row["source"]), task_id=row["task_id"], event_id=row["event_id"], path=row["path"],
        content_hash=row["content_hash"], commit=row["commit"], detail=row["detail"],
    )
    return Memory(
        id=int(row["id"]), project=row["project"], kind=Kind(row["kind"]), text=row["text"],
        status=Status(row["status"]), provenance=provenance, confidence=float(row["confidence"]),
        created_at=row["created_at"], updated_at=row["updated_at"], last_used_at=row["last_used_at"],
        use_count=int(row["use_count"]), evidence=int(row["evidence"]), supersedes=row["supersedes"],
        superseded_by=row["superseded_by"],
        archived_reason=ArchiveReason(row["archived_reason"]) if row["archived_reason"] else None,
        citations=tuple(row["citations"] or ()),
    )
