"""The memory store's tables, in SQLAlchemy Core, in the same database as the task store.

They are on their own :class:`~sqlalchemy.MetaData` (with errand.database's
naming convention) rather than on ``errand.tasks.store.schema.metadata``: memory sits
below tasks in the layer map, so it must not import the task schema, and
``errand/migrations/env.py`` targets both. The tables themselves are created
by the database's one Alembic chain (:mod:`errand.database`), revision
``0003``, so one ``migrate()`` brings the whole database up to date.

``memories.id`` is an INTEGER PRIMARY KEY: on SQLite it is the rowid, which the
FTS5 index (``memories_fts``, external content, kept in step by triggers; see
:mod:`errand.memory.lexical`) refers to. Times are ``Double`` seconds since the
epoch (UTC), as in the task schema.
"""

from __future__ import annotations

import sqlalchemy as sa

from errand.database import NAMING_CONVENTION

__all__ = ["FTS_TABLE", "MAX_WORD_CHARS", "memories", "memory_projects", "memory_uses", "memory_vectors",
           "memory_words", "metadata"]

FTS_TABLE = "memories_fts"

metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)

KINDS = "'instruction', 'command', 'convention', 'pitfall', 'preference', 'fact'"
STATUSES = "'proposed', 'active', 'archived'"
SOURCES = "'task', 'review', 'file', 'commit', 'person', 'model'"

memories = sa.Table(
    "memories",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("project", sa.Text, nullable=False),  # errand.memory.project_key(repo)
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("text", sa.Text, nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    # Provenance. task_id has no foreign key: a memory outlives the task it came from.
    sa.Column("source", sa.String(16), nullable=False),
    sa.Column("task_id", sa.String(32), nullable=True),
    sa.Column("event_id", sa.Integer, nullable=True),
    sa.Column("path", sa.Text, nullable=True),
    sa.Column("content_hash", sa.String(80), nullable=True),
    sa.Column("commit", sa.String(64), nullable=True),
    sa.Column("detail", sa.Text, nullable=True),
    sa.Column("confidence", sa.Double, nullable=False),
    sa.Column("created_at", sa.Double, nullable=False),
    sa.Column("updated_at", sa.Double, nullable=False),
    sa.Column("last_used_at", sa.Double, nullable=True),
    sa.Column("use_count", sa.Integer, nullable=False, server_default="0"),
    sa.Column("evidence", sa.Integer, nullable=False, server_default="1"),
    sa.Column("supersedes", sa.Integer, sa.ForeignKey("memories.id", ondelete="SET NULL"), nullable=True),
    sa.Column("superseded_by", sa.Integer, sa.ForeignKey("memories.id", ondelete="SET NULL"), nullable=True),
    sa.Column("archived_reason", sa.String(32), nullable=True),
    sa.Column("fingerprint", sa.String(64), nullable=False),  # sha256 of the normalized text
    sa.Column("citations", sa.JSON, nullable=False),  # files and symbols the text cites
    sa.CheckConstraint(f"kind IN ({KINDS})", name="kind"),
    sa.CheckConstraint(f"status IN ({STATUSES})", name="status"),
    sa.CheckConstraint(f"source IN ({SOURCES})", name="source"),
    sa.Index(None, "project", "status", "id"),
    sa.Index(None, "project", "fingerprint"),
    sa.Index(None, "project", "path"),
)

# One row a project: ``generation`` goes up with every write that changes what the
# caches hold (texts, statuses, memories added or removed; not use counts, evidence
# or confidence), so a process can tell in one indexed read whether its cached
# vectors (or fallback lexical index) are still current.
memory_projects = sa.Table(
    "memory_projects",
    metadata,
    sa.Column("project", sa.Text, primary_key=True),
    sa.Column("generation", sa.Integer, nullable=False),
)

memory_vectors = sa.Table(
    "memory_vectors",
    metadata,
    sa.Column("memory_id", sa.Integer, sa.ForeignKey("memories.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("model", sa.String(64), primary_key=True),  # the Embedder's name
    sa.Column("project", sa.Text, nullable=False),
    sa.Column("vector", sa.LargeBinary, nullable=False),  # little-endian float32, L2-normalized
    sa.Index(None, "project", "model"),
)

#: Longer "words" (hashes, base64, URLs run together) get no vector: no index holds any length of text,
#: and e5 reads a query word's first tokens only.
MAX_WORD_CHARS = 64

# The query vector of every word the store's memories hold, one row per embedder and word, for the
# static query encoder (errand.memory.words). A word's vector depends on nothing but the word, so
# the table is shared by every project; ``id`` orders rows as they were written, so a process reads
# only the rows it has not seen. Rows are never removed: a word no memory holds any more costs a row.
memory_words = sa.Table(
    "memory_words",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("model", sa.String(64), nullable=False),  # the Embedder's name
    sa.Column("word", sa.String(MAX_WORD_CHARS), nullable=False),
    sa.Column("vector", sa.LargeBinary, nullable=False),  # little-endian float32, L2-normalized
    sa.UniqueConstraint("model", "word"),
)

# Which memories a task was given, recalled or said it used.
memory_uses = sa.Table(
    "memory_uses",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("memory_id", sa.Integer, sa.ForeignKey("memories.id", ondelete="CASCADE"), nullable=False),
    sa.Column("task_id", sa.String(32), nullable=False),
    sa.Column("how", sa.String(16), nullable=False),
    sa.Column("time", sa.Double, nullable=False),
    sa.CheckConstraint("how IN ('given', 'recalled', 'used')", name="how"),
    sa.Index(None, "task_id", "id"),
    sa.Index(None, "memory_id"),
)
