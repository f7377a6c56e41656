"""The forge's tables: which task came from (or pushes to) which issue and pull request,
and the webhook deliveries already handled. Changes need a revision under migrations."""

from __future__ import annotations

import sqlalchemy as sa

from errand.database import NAMING_CONVENTION

__all__ = ["deliveries", "links", "metadata"]

metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)

links = sa.Table(
    "forge_links",
    metadata,
    # Not a foreign key in SQL (the tasks table is another layer's metadata); every row is
    # written by errand right after the task it names.
    sa.Column("task_id", sa.String(32), primary_key=True),
    sa.Column("forge", sa.String(16), nullable=False),  # "github"
    sa.Column("base_url", sa.Text, nullable=False),
    sa.Column("repo", sa.Text, nullable=False),  # owner/name
    sa.Column("issue", sa.Integer, nullable=True),  # the issue the task resolves ("Fixes #N")
    sa.Column("requested_by", sa.Text, nullable=True),  # the login that asked
    sa.Column("comment_id", sa.BigInteger, nullable=True),  # the comment that asked, when one did
    sa.Column("pull", sa.Integer, nullable=True),  # the pull request the task's work goes to
    sa.Column("pull_url", sa.Text, nullable=True),
    sa.Column("pull_branch", sa.Text, nullable=True),  # the forge branch its commits are pushed to
    sa.Column("pushed", sa.String(64), nullable=True),  # the last commit pushed for this task
    sa.Column("batch", sa.String(16), nullable=True),  # the backlog batch that started it ("b-…")
    sa.Column("created_at", sa.Double, nullable=False),
    sa.Index(None, "repo", "pull"),
)

deliveries = sa.Table(
    "forge_deliveries",
    metadata,
    sa.Column("id", sa.String(80), primary_key=True),  # the forge's delivery id (X-GitHub-Delivery)
    sa.Column("event", sa.String(64), nullable=False),
    sa.Column("received_at", sa.Double, nullable=False),
    sa.Column("outcome", sa.Text, nullable=True),  # what errand did: "started t-…", "ignored: …"
)
