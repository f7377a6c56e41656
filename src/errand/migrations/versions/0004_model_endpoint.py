"""A task records the model endpoint it was submitted with (provider, model, base URL, the
name of the key's variable), so a worker uses that instead of its own environment.

Revision ID: 0004
Revises: 0003

Older rows keep their plain ``model`` spec and no endpoint; a worker resolves those
itself, as before, and says so in the task's log.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision: str | None = "0003"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("model_endpoint", sa.JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("model_endpoint")
