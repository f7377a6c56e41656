"""Runs belong to a round (one claim of a task, one run per parallel attempt); a task
records the commit its base ref named at submission, so every round starts there.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision: str | None = "0001"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("base_commit", sa.String(64), nullable=True))
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("round", sa.Integer, nullable=False, server_default="1"))
    op.create_index("ix_runs_task_id_round", "runs", ["task_id", "round"])


def downgrade() -> None:
    op.drop_index("ix_runs_task_id_round", "runs")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("round")
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("base_commit")
