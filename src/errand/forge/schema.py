"""The forge's tables: which task came from (or pushes to) which issue and pull request,
the webhook deliveries already handled, and the forge's own bookkeeping of a task (what it
asked of a round, the question it posted, the CI fixes it started). Changes need a revision
under migrations."""

from __future__ import annotations

import sqlalchemy as sa

from errand.database import NAMING_CONVENTION

__all__ = ["ci_fixes", "deliveries", "links", "metadata", "questions", "rounds"]

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

# What the forge asked of a round it started (a review comment, a red CI, a fork's pull request):
# written once, with the task; read wherever the round's commit goes and who hears of it.
rounds = sa.Table(
    "forge_rounds",
    metadata,
    sa.Column("task_id", sa.String(32), primary_key=True),
    sa.Column("pull", sa.Integer, nullable=False),  # the pull request the round was asked on
    sa.Column("branch", sa.Text, nullable=False),  # its head branch (``owner:branch`` for a fork's)
    sa.Column("head", sa.String(64), nullable=False),  # the commit the round starts from
    sa.Column("requested_by", sa.Text, nullable=True),
    sa.Column("threads", sa.JSON, nullable=False),  # the line comments' ids that each hear back on their thread
    sa.Column("ci", sa.Boolean, nullable=False),  # a CI-fix round
    sa.Column("fork", sa.Text, nullable=True),  # the fork the pull request's head lives in
    sa.Column("push_repo", sa.Text, nullable=True),  # where its commit goes when not the repository itself
    sa.Column("fork_pull", sa.Integer, nullable=True),  # a fork's pull request errand may not push to
    sa.Column("created_at", sa.Double, nullable=False),
)

# The question a task waits on, as posted on the forge: posted once; its comment is no answer.
questions = sa.Table(
    "forge_questions",
    metadata,
    sa.Column("task_id", sa.String(32), primary_key=True),
    sa.Column("question", sa.Integer, nullable=False),  # the id of the task's ``question`` event
    sa.Column("number", sa.Integer, nullable=False),  # the issue or pull request it was posted on
    sa.Column("comment_id", sa.BigInteger, nullable=True),  # errand's comment (None: the forge gave no id)
    sa.Column("posted_at", sa.Double, nullable=False),
)

# A CI-fix round asked for a red commit: one per commit of a task's pull request.
ci_fixes = sa.Table(
    "forge_ci_fixes",
    metadata,
    sa.Column("task_id", sa.String(32), primary_key=True),  # the task whose pushed commit went red
    sa.Column("red_commit", sa.String(64), primary_key=True),
    sa.Column("fix_task_id", sa.String(32), nullable=False),
    sa.Column("asked_at", sa.Double, nullable=False),
)
