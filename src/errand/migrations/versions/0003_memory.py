"""Project memory: memories, their vectors, uses, per-project generations, and (SQLite) an FTS5 index.

Revision ID: 0003
Revises: 0002

The tables are those of :mod:`errand.memory.schema`. On SQLite the revision
also makes ``memories_fts``, an external-content FTS5 table over
``memories.text`` kept in step by triggers; other databases get no full-text
table and the memory layer ranks with its own BM25 instead.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision: str | None = "0002"
branch_labels: str | None = None
depends_on: str | None = None

KINDS = "'instruction', 'command', 'convention', 'pitfall', 'preference', 'fact'"
STATUSES = "'proposed', 'active', 'archived'"
SOURCES = "'task', 'review', 'file', 'commit', 'person', 'model'"

FTS = [
    # Porter stemming so "tests" finds "test"; unicode61 folds case and diacritics.
    "CREATE VIRTUAL TABLE memories_fts USING fts5(text, content='memories', content_rowid='id', "
    "tokenize='porter unicode61 remove_diacritics 2')",
    "CREATE TRIGGER memories_fts_insert AFTER INSERT ON memories BEGIN "
    "INSERT INTO memories_fts(rowid, text) VALUES (new.id, new.text); END",
    "CREATE TRIGGER memories_fts_delete AFTER DELETE ON memories BEGIN "
    "INSERT INTO memories_fts(memories_fts, rowid, text) VALUES ('delete', old.id, old.text); END",
    "CREATE TRIGGER memories_fts_update AFTER UPDATE OF text ON memories BEGIN "
    "INSERT INTO memories_fts(memories_fts, rowid, text) VALUES ('delete', old.id, old.text); "
    "INSERT INTO memories_fts(rowid, text) VALUES (new.id, new.text); END",
]


def upgrade() -> None:
    op.create_table(
        "memories",
        sa.Column("id", sa.Integer, autoincrement=True, nullable=False),
        sa.Column("project", sa.Text, nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
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
        sa.Column("supersedes", sa.Integer, nullable=True),
        sa.Column("superseded_by", sa.Integer, nullable=True),
        sa.Column("archived_reason", sa.String(32), nullable=True),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("citations", sa.JSON, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_memories"),
        sa.ForeignKeyConstraint(["supersedes"], ["memories.id"], name="fk_memories_supersedes_memories",
                                ondelete="SET NULL"),
        sa.ForeignKeyConstraint(["superseded_by"], ["memories.id"], name="fk_memories_superseded_by_memories",
                                ondelete="SET NULL"),
        sa.CheckConstraint(f"kind IN ({KINDS})", name="ck_memories_kind"),
        sa.CheckConstraint(f"status IN ({STATUSES})", name="ck_memories_status"),
        sa.CheckConstraint(f"source IN ({SOURCES})", name="ck_memories_source"),
    )
    op.create_index("ix_memories_project_status_id", "memories", ["project", "status", "id"])
    op.create_index("ix_memories_project_fingerprint", "memories", ["project", "fingerprint"])
    op.create_index("ix_memories_project_path", "memories", ["project", "path"])

    op.create_table(
        "memory_projects",
        sa.Column("project", sa.Text, nullable=False),
        sa.Column("generation", sa.Integer, nullable=False),
        sa.PrimaryKeyConstraint("project", name="pk_memory_projects"),
    )

    op.create_table(
        "memory_vectors",
        sa.Column("memory_id", sa.Integer, nullable=False),
        sa.Column("model", sa.String(64), nullable=False),
        sa.Column("project", sa.Text, nullable=False),
        sa.Column("vector", sa.LargeBinary, nullable=False),
        sa.PrimaryKeyConstraint("memory_id", "model", name="pk_memory_vectors"),
        sa.ForeignKeyConstraint(["memory_id"], ["memories.id"], name="fk_memory_vectors_memory_id_memories",
                                ondelete="CASCADE"),
    )
    op.create_index("ix_memory_vectors_project_model", "memory_vectors", ["project", "model"])

    op.create_table(
        "memory_uses",
        sa.Column("id", sa.Integer, autoincrement=True, nullable=False),
        sa.Column("memory_id", sa.Integer, nullable=False),
        sa.Column("task_id", sa.String(32), nullable=False),
        sa.Column("how", sa.String(16), nullable=False),
        sa.Column("time", sa.Double, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_memory_uses"),
        sa.ForeignKeyConstraint(["memory_id"], ["memories.id"], name="fk_memory_uses_memory_id_memories",
                                ondelete="CASCADE"),
        sa.CheckConstraint("how IN ('given', 'recalled', 'used')", name="ck_memory_uses_how"),
    )
    op.create_index("ix_memory_uses_task_id_id", "memory_uses", ["task_id", "id"])
    op.create_index("ix_memory_uses_memory_id", "memory_uses", ["memory_id"])

    if op.get_bind().dialect.name == "sqlite":
        for statement in FTS:
            op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for name in ("memories_fts_insert", "memories_fts_delete", "memories_fts_update"):
            op.execute(f"DROP TRIGGER IF EXISTS {name}")
        op.execute("DROP TABLE IF EXISTS memories_fts")
    op.drop_table("memory_uses")
    op.drop_table("memory_vectors")
    op.drop_table("memory_projects")
    op.drop_table("memories")
