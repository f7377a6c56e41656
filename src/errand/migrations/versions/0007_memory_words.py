"""The word-vector table of the static query encoder (``errand.memory.words``).

A store upgraded to this revision has no word vectors yet; they are written
with each new memory's words, and ``MemoryStore.backfill_vectors`` (which
``errand memory backfill`` runs) fills them for the memories already stored.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision: str | None = "0006"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "memory_words",
        sa.Column("id", sa.Integer, autoincrement=True, nullable=False),
        sa.Column("model", sa.String(64), nullable=False),
        sa.Column("word", sa.String(64), nullable=False),
        sa.Column("vector", sa.LargeBinary, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_memory_words"),
        sa.UniqueConstraint("model", "word", name="uq_memory_words_model_word"),
    )


def downgrade() -> None:
    op.drop_table("memory_words")
