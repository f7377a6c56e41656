"""The forge's tables: tasks linked to issues and pull requests, and webhook deliveries seen.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision: str | None = "0005"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "forge_links",
        sa.Column("task_id", sa.String(32), nullable=False),
        sa.Column("forge", sa.String(16), nullable=False),
        sa.Column("base_url", sa.Text, nullable=False),
        sa.Column("repo", sa.Text, nullable=False),
        sa.Column("issue", sa.Integer, nullable=True),
        sa.Column("requested_by", sa.Text, nullable=True),
        sa.Column("comment_id", sa.BigInteger, nullable=True),
        sa.Column("pull", sa.Integer, nullable=True),
        sa.Column("pull_url", sa.Text, nullable=True),
        sa.Column("pull_branch", sa.Text, nullable=True),
        sa.Column("pushed", sa.String(64), nullable=True),
        sa.Column("batch", sa.String(16), nullable=True),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.PrimaryKeyConstraint("task_id", name="pk_forge_links"),
    )
    op.create_index("ix_forge_links_repo_pull", "forge_links", ["repo", "pull"])
    op.create_table(
        "forge_deliveries",
        sa.Column("id", sa.String(80), nullable=False),
        sa.Column("event", sa.String(64), nullable=False),
        sa.Column("received_at", sa.Double, nullable=False),
        sa.Column("outcome", sa.Text, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_forge_deliveries"),
    )


def downgrade() -> None:
    op.drop_table("forge_deliveries")
    op.drop_index("ix_forge_links_repo_pull", "forge_links")
    op.drop_table("forge_links")
