"""A task records the agent that works it: errand's own loop or an agent CLI such as Claude Code.

Revision ID: 0009
Revises: 0008

Older rows have none, which is errand's own agent, as before.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision: str | None = "0008"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("agent", sa.String(32), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("agent")
