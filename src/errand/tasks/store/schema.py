"""The task store's tables, in SQLAlchemy Core (no ORM).

Times are ``Double`` seconds since the Unix epoch (UTC). SQLite has no
timezone-aware timestamp type: ``DateTime(timezone=True)`` is stored there as a
naive string and read back without its zone, so the same code would see
different values on SQLite and PostgreSQL. A float is unambiguous UTC, sorts and
compares identically on both (``double precision`` on PostgreSQL, microsecond
resolution), and is what ``time.time()`` gives. Convert at the edges.

Changing a table here needs a new revision under ``errand/migrations/versions``.
"""

from __future__ import annotations

import sqlalchemy as sa

from errand.database import NAMING_CONVENTION

__all__ = ["dispatches", "events", "metadata", "reviews", "runs", "tasks", "workers"]

metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)

tasks = sa.Table(
    "tasks",
    metadata,
    sa.Column("id", sa.String(32), primary_key=True),  # "t-xxxxxxxx"
    sa.Column("title", sa.Text, nullable=False),
    sa.Column("instruction", sa.Text, nullable=False),
    sa.Column("repo", sa.Text, nullable=False),  # local path or git URL
    sa.Column("base_ref", sa.Text, nullable=False),
    # The commit base_ref named when the task was submitted: every round (and the
    # accept) starts from it even if the ref moves. None for tasks from before 0002.
    sa.Column("base_commit", sa.String(64), nullable=True),
    sa.Column("model", sa.Text, nullable=True),  # a named model or "provider:name"; None: the worker's default
    # The endpoint the spec resolved to at submission: provider, model, base_url, api_key_env
    # (a variable's name, never a key) and a salted fingerprint of the key. None before 0004.
    sa.Column("model_endpoint", sa.JSON, nullable=True),
    sa.Column("attempts", sa.Integer, nullable=False, server_default="1"),  # parallel attempts per run
    # The agent that works the task (errand.agent.seam's kinds: "claude-code", …). None: errand's own.
    sa.Column("agent", sa.String(32), nullable=True),
    sa.Column("state", sa.String(32), nullable=False),
    sa.Column("branch", sa.Text, nullable=True),  # "errand/<id>-<slug>", fixed at creation
    sa.Column("parent_id", sa.String(32), sa.ForeignKey("tasks.id"), nullable=True),
    # The worker that claimed the task's current round; recovery requeues a task whose
    # claimer died before it started a run. None before 0005 and for tasks never claimed.
    sa.Column("claimed_by", sa.String(160), nullable=True),
    # The claim of the task's current round (the Temporal engine's dispatch id, written as it claims
    # the task): a round's start issued for another claim finds the task moved on, and begins nothing.
    # None before 0011 and for tasks the local engine claims.
    sa.Column("claim", sa.Integer, nullable=True),
    sa.Column("created_at", sa.Double, nullable=False),
    sa.Column("updated_at", sa.Double, nullable=False),
    # Keyset pagination walks (created_at, id) downward, optionally within a state or repo.
    sa.Index(None, "created_at", "id"),
    sa.Index(None, "state", "created_at", "id"),
    sa.Index(None, "repo", "created_at", "id"),
)

runs = sa.Table(
    "runs",
    metadata,
    sa.Column("id", sa.String(48), primary_key=True),  # "<task id>-r<attempt>"
    sa.Column("task_id", sa.String(32), sa.ForeignKey("tasks.id"), nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False),  # 1, 2, … within the task
    # A round is one claim of the task: its first run, a follow-up, a requeue after
    # an interruption. A round of a task with attempts=N has N runs side by side.
    sa.Column("round", sa.Integer, nullable=False, server_default="1"),
    # running | succeeded | failed | cancelled | interrupted. One column, not a
    # state plus an "interrupted" flag that could disagree with it.
    sa.Column("state", sa.String(32), nullable=False),
    sa.Column("worker", sa.Text, nullable=False),
    sa.Column("started_at", sa.Double, nullable=False),
    sa.Column("ended_at", sa.Double, nullable=True),
    sa.Column("result", sa.JSON, nullable=True),
    # The last event seq handed out; bumped under the row's lock so seq is gap-free per run.
    sa.Column("last_seq", sa.Integer, nullable=False, server_default="0"),
    sa.UniqueConstraint("task_id", "attempt"),
    sa.Index(None, "state", "worker"),
    sa.Index(None, "task_id", "round"),
)

events = sa.Table(
    "events",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("task_id", sa.String(32), sa.ForeignKey("tasks.id"), nullable=False),
    sa.Column("run_id", sa.String(48), sa.ForeignKey("runs.id"), nullable=True),  # None: about the task
    sa.Column("seq", sa.Integer, nullable=True),  # 1, 2, … within the run; None without a run
    sa.Column("time", sa.Double, nullable=False),
    sa.Column("kind", sa.String(64), nullable=False),
    sa.Column("data", sa.JSON, nullable=False),
    sa.UniqueConstraint("run_id", "seq"),
    sa.Index(None, "task_id", "id"),  # "events of a task after id N" (SSE resume)
)

reviews = sa.Table(
    "reviews",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("task_id", sa.String(32), sa.ForeignKey("tasks.id"), nullable=False),
    sa.Column("run_id", sa.String(48), sa.ForeignKey("runs.id"), nullable=True),  # the run reviewed
    sa.Column("verdict", sa.String(16), nullable=False),  # accepted | rejected | followup
    sa.Column("reason", sa.Text, nullable=True),  # the rejection reason or follow-up instruction
    sa.Column("time", sa.Double, nullable=False),
    sa.CheckConstraint("verdict IN ('accepted', 'rejected', 'followup')", name="verdict"),
    sa.Index(None, "task_id", "id"),
)

workers = sa.Table(
    "workers",
    metadata,
    sa.Column("id", sa.String(160), primary_key=True),  # "<host>:<pid>:<random>", as runs.worker names it
    # "<host>:<errand home>#<its id>": a worker holding that home's lock knows every other worker of
    # the same home is dead, whatever its lease says (the lock went when the process did).
    sa.Column("home", sa.Text, nullable=False),
    sa.Column("pid", sa.Integer, nullable=False),
    sa.Column("started_at", sa.Double, nullable=False),
    sa.Column("heartbeat_at", sa.Double, nullable=False),
    # A worker renews its lease well before this; one past it is dead (or cut off from the
    # database, which is the same for its tasks), and another worker recovers its runs.
    sa.Column("expires_at", sa.Double, nullable=False),
    sa.Index(None, "expires_at"),
)

# The Temporal engine's outbox: each round handed to Temporal is written here in the transaction
# that claims its task, and stays until the Temporal service acknowledged it, however long that takes.
dispatches = sa.Table(
    "dispatches",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),  # the round's key in its workflow
    sa.Column("task_id", sa.String(32), sa.ForeignKey("tasks.id"), nullable=False),
    sa.Column("created_at", sa.Double, nullable=False),
    sa.Column("tries", sa.Integer, nullable=False, server_default="0"),  # sends that were not acknowledged
    sa.Column("last_error", sa.Text, nullable=True),  # what the service (or its absence) said last
    sa.Index(None, "task_id"),
    # Ids are never reused (SQLite would reuse the highest after a delete): a workflow counts each once.
    sqlite_autoincrement=True,
)
