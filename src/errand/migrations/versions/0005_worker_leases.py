"""Workers hold leases in the database, and a task records the worker that claimed it, so
a worker on another machine can tell a dead worker (its lease expired) from a slow one.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision: str | None = "0004"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "workers",
        sa.Column("id", sa.String(160), nullable=False),
        sa.Column("home", sa.Text, nullable=False),
        sa.Column("pid", sa.Integer, nullable=False),
        sa.Column("started_at", sa.Double, nullable=False),
        sa.Column("heartbeat_at", sa.Double, nullable=False),
        sa.Column("expires_at", sa.Double, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_workers"),
    )
    op.create_index("ix_workers_expires_at", "workers", ["expires_at"])
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("claimed_by", sa.String(160), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("claimed_by")
    op.drop_index("ix_workers_expires_at", "workers")
    op.drop_table("workers")
