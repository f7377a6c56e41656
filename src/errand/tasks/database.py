"""Connecting to the task store's database and migrating it to the current schema.

SQLite is the embedded default; PostgreSQL takes the same schema. Migrations
are Alembic revisions shipped in this package and recorded, as Alembic does, in
the ``alembic_version`` table; :func:`migrate` runs them in code, with no
``alembic.ini``.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import command
from alembic.config import Config

from errand import _settings

__all__ = ["BUSY_TIMEOUT_MS", "WRITE", "connect", "default_url", "migrate"]

MIGRATIONS = Path(__file__).parent / "migrations"
BUSY_TIMEOUT_MS = 30_000
#: Execution option marking a connection that will write (``BEGIN IMMEDIATE`` on SQLite).
WRITE = "errand_write"


def default_url() -> str:
    """``$ERRAND_DATABASE_URL`` if set (say, a PostgreSQL URL for several machines), else
    ``sqlite:///<errand home>/errand.db``, creating the home directory."""
    configured = os.environ.get("ERRAND_DATABASE_URL", "").strip()
    if configured:
        return configured
    home = _settings.home()
    home.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{home / 'errand.db'}"


def connect(url: str) -> sa.Engine:
    engine = sa.create_engine(url, **_sqlite_arguments(url))
    if engine.dialect.name == "sqlite":
        _configure_sqlite(engine)
    return engine


def migrate(engine: sa.Engine) -> None:
    """Upgrade the database to the newest revision; a no-op when it is there already."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    # One write transaction around the whole upgrade: two processes opening a
    # fresh store at once serialize here, and the second finds the schema made.
    with engine.execution_options(**{WRITE: True}).begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "head")


def _sqlite_arguments(url: str) -> dict[str, Any]:
    if not url.startswith("sqlite"):
        return {}
    # Connections move between threads through the pool, one thread at a time.
    return {"connect_args": {"check_same_thread": False, "timeout": BUSY_TIMEOUT_MS / 1000}}


def _configure_sqlite(engine: sa.Engine) -> None:
    @sa.event.listens_for(engine, "connect")
    def on_connect(dbapi_connection: sqlite3.Connection, _record: object) -> None:
        # Let SQLAlchemy, not the sqlite3 module, decide where transactions begin
        # (the module would otherwise run DDL outside any transaction).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.execute("PRAGMA synchronous = NORMAL")  # durable across process crashes in WAL mode
        cursor.close()

    @sa.event.listens_for(engine, "begin")
    def on_begin(connection: sa.Connection) -> None:
        # A writer takes the write lock up front. A deferred transaction that
        # reads and then writes can fail with SQLITE_BUSY at once when another
        # writer committed in between, and the busy timeout does not retry that.
        write = connection.get_execution_options().get(WRITE, False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")
