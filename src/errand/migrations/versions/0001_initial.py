"""The initial task store: tasks, runs, events, reviews.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision: str | None = None
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "tasks",
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("title", sa.Text, nullable=False),
        sa.Column("instruction", sa.Text, nullable=False),
        sa.Column("repo", sa.Text, nullable=False),
        sa.Column("base_ref", sa.Text, nullable=False),
        sa.Column("model", sa.Text, nullable=True),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="1"),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("branch", sa.Text, nullable=True),
        sa.Column("parent_id", sa.String(32), nullable=True),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.Column("updated_at", sa.Double, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_tasks"),
        sa.ForeignKeyConstraint(["parent_id"], ["tasks.id"], name="fk_tasks_parent_id_tasks"),
    )
    op.create_index("ix_tasks_created_at_id", "tasks", ["created_at", "id"])
    op.create_index("ix_tasks_state_created_at_id", "tasks", ["state", "created_at", "id"])
    op.create_index("ix_tasks_repo_created_at_id", "tasks", ["repo", "created_at", "id"])

    op.create_table(
        "runs",
        sa.Column("id", sa.String(48), nullable=False),
        sa.Column("task_id", sa.String(32), nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("worker", sa.Text, nullable=False),
        sa.Column("started_at", sa.Double, nullable=False),
        sa.Column("ended_at", sa.Double, nullable=True),
        sa.Column("result", sa.JSON, nullable=True),
        sa.Column("last_seq", sa.Integer, nullable=False, server_default="0"),
        sa.PrimaryKeyConstraint("id", name="pk_runs"),
        sa.ForeignKeyConstraint(["task_id"], ["tasks.id"], name="fk_runs_task_id_tasks"),
        sa.UniqueConstraint("task_id", "attempt", name="uq_runs_task_id_attempt"),
    )
    op.create_index("ix_runs_state_worker", "runs", ["state", "worker"])

    op.create_table(
        "events",
        sa.Column("id", sa.Integer, autoincrement=True, nullable=False),
        sa.Column("task_id", sa.String(32), nullable=False),
        sa.Column("run_id", sa.String(48), nullable=True),
        sa.Column("seq", sa.Integer, nullable=True),
        sa.Column("time", sa.Double, nullable=False),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("data", sa.JSON, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_events"),
        sa.ForeignKeyConstraint(["task_id"], ["tasks.id"], name="fk_events_task_id_tasks"),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name="fk_events_run_id_runs"),
        sa.UniqueConstraint("run_id", "seq", name="uq_events_run_id_seq"),
    )
    op.create_index("ix_events_task_id_id", "events", ["task_id", "id"])

    op.create_table(
        "reviews",
        sa.Column("id", sa.Integer, autoincrement=True, nullable=False),
        sa.Column("task_id", sa.String(32), nullable=False),
        sa.Column("run_id", sa.String(48), nullable=True),
        sa.Column("verdict", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text, nullable=True),
        sa.Column("time", sa.Double, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_reviews"),
        sa.ForeignKeyConstraint(["task_id"], ["tasks.id"], name="fk_reviews_task_id_tasks"),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name="fk_reviews_run_id_runs"),
        sa.CheckConstraint("verdict IN ('accepted', 'rejected', 'followup')", name="ck_reviews_verdict"),
    )
    op.create_index("ix_reviews_task_id_id", "reviews", ["task_id", "id"])


def downgrade() -> None:
    op.drop_table("reviews")
    op.drop_table("events")
    op.drop_table("runs")
    op.drop_table("tasks")
