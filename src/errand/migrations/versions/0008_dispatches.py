"""The Temporal engine's outbox: a round handed to Temporal is written down before it is sent,
and sent until the service acknowledges it (a dispatch lost to an outage stranded its task).

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision: str | None = "0007"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "dispatches",
        sa.Column("id", sa.Integer, autoincrement=True, nullable=False),
        sa.Column("task_id", sa.String(32), nullable=False),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.Column("tries", sa.Integer, nullable=False, server_default="0"),
        sa.Column("last_error", sa.Text, nullable=True),
        sa.ForeignKeyConstraint(["task_id"], ["tasks.id"], name="fk_dispatches_task_id_tasks"),
        sa.PrimaryKeyConstraint("id", name="pk_dispatches"),
        sqlite_autoincrement=True,  # a dispatch's id is a round's key: never reused after a delete
    )
    op.create_index("ix_dispatches_task_id", "dispatches", ["task_id"])


def downgrade() -> None:
    op.drop_index("ix_dispatches_task_id", "dispatches")
    op.drop_table("dispatches")
