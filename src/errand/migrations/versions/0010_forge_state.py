"""The forge's own bookkeeping in its own tables, out of the task's event log.

Revision ID: 0010
Revises: 0009

What the forge asked of a round (``forge_followup``), the question it posted
(``forge_question_posted``) and the CI fixes it started (``forge_ci_fix``) were
read back from the event log; they are rows now. The rows are filled from the
events an older errand wrote, so a round, a question or a fix from before is
still found. The events stay in the log, where a person reads them.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision: str | None = "0009"
branch_labels: str | None = None
depends_on: str | None = None

_events = sa.table("events", sa.column("id", sa.Integer), sa.column("task_id", sa.String), sa.column("kind", sa.String),
                   sa.column("time", sa.Double), sa.column("data", sa.JSON))


def upgrade() -> None:
    rounds = op.create_table(
        "forge_rounds",
        sa.Column("task_id", sa.String(32), nullable=False),
        sa.Column("pull", sa.Integer, nullable=False),
        sa.Column("branch", sa.Text, nullable=False),
        sa.Column("head", sa.String(64), nullable=False),
        sa.Column("requested_by", sa.Text, nullable=True),
        sa.Column("threads", sa.JSON, nullable=False),
        sa.Column("ci", sa.Boolean, nullable=False),
        sa.Column("fork", sa.Text, nullable=True),
        sa.Column("push_repo", sa.Text, nullable=True),
        sa.Column("fork_pull", sa.Integer, nullable=True),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.PrimaryKeyConstraint("task_id", name="pk_forge_rounds"),
    )
    questions = op.create_table(
        "forge_questions",
        sa.Column("task_id", sa.String(32), nullable=False),
        sa.Column("question", sa.Integer, nullable=False),
        sa.Column("number", sa.Integer, nullable=False),
        sa.Column("comment_id", sa.BigInteger, nullable=True),
        sa.Column("posted_at", sa.Double, nullable=False),
        sa.PrimaryKeyConstraint("task_id", name="pk_forge_questions"),
    )
    ci_fixes = op.create_table(
        "forge_ci_fixes",
        sa.Column("task_id", sa.String(32), nullable=False),
        sa.Column("red_commit", sa.String(64), nullable=False),
        sa.Column("fix_task_id", sa.String(32), nullable=False),
        sa.Column("asked_at", sa.Double, nullable=False),
        sa.PrimaryKeyConstraint("task_id", "red_commit", name="pk_forge_ci_fixes"),
    )
    assert rounds is not None and questions is not None and ci_fixes is not None
    _fill(rounds, "forge_followup", _round)
    _fill(questions, "forge_question_posted", _question)
    _fill(ci_fixes, "forge_ci_fix", _ci_fix)


def downgrade() -> None:
    op.drop_table("forge_ci_fixes")
    op.drop_table("forge_questions")
    op.drop_table("forge_rounds")


def _fill(table: sa.Table, kind: str, row: Any) -> None:
    """One row per key from the events of ``kind``, the last event winning (as the last was the one read)."""
    query = sa.select(_events.c.task_id, _events.c.time, _events.c.data).where(_events.c.kind == kind) \
        .order_by(_events.c.id)
    rows: dict[tuple[object, ...], dict[str, Any]] = {}
    for task_id, at, data in op.get_bind().execute(query):
        made = row(task_id, at, data) if isinstance(data, dict) else None
        if made is not None:
            rows[tuple(made[column.name] for column in table.primary_key.columns)] = made
    if rows:
        op.bulk_insert(table, list(rows.values()))


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _round(task_id: str, at: float, data: dict[str, Any]) -> dict[str, Any] | None:
    if _int(data.get("pull")) is None:
        return None
    return {"task_id": task_id, "pull": data["pull"], "branch": str(data.get("branch") or ""),
            "head": str(data.get("head") or ""), "requested_by": data.get("requested_by"),
            "threads": [t for t in data.get("threads") or [] if _int(t) is not None], "ci": bool(data.get("ci")),
            "fork": data.get("fork"), "push_repo": data.get("push_repo") or None,
            "fork_pull": _int(data.get("fork_pull")), "created_at": at}


def _question(task_id: str, at: float, data: dict[str, Any]) -> dict[str, Any] | None:
    if _int(data.get("question")) is None or _int(data.get("on")) is None:
        return None
    return {"task_id": task_id, "question": data["question"], "number": data["on"],
            "comment_id": _int(data.get("comment")), "posted_at": at}


def _ci_fix(task_id: str, at: float, data: dict[str, Any]) -> dict[str, Any] | None:
    if not data.get("commit") or not data.get("task_id"):
        return None
    return {"task_id": task_id, "red_commit": str(data["commit"]), "fix_task_id": str(data["task_id"]),
            "asked_at": at}
