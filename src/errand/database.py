"""errand's SQL database: connecting, migrating, and the transactions its stores use.

One database holds the task store and project memory. SQLite is the embedded
default; PostgreSQL takes the same schema. Migrations are Alembic revisions in
``errand/migrations`` (the one place that knows every layer's tables), recorded,
as Alembic does, in the ``alembic_version`` table; :func:`migrate` runs them in
code, with no ``alembic.ini``. This module sits beneath the layers that keep
state in the database, so each can open it without reaching up to another.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Self

import sqlalchemy as sa
from alembic import command
from alembic.config import Config

from errand import _settings

__all__ = ["BUSY_TIMEOUT_MS", "NAMING_CONVENTION", "WRITE", "SqlStore", "connect", "default_url", "migrate",
           "open_engine"]

MIGRATIONS = Path(__file__).parent / "migrations"
MMAP_BYTES = 1 << 30
BUSY_TIMEOUT_MS = 30_000
#: The PostgreSQL advisory lock migrations hold (any fixed 64-bit number of errand's own).
MIGRATION_LOCK = 0x6572_7261_6E64  # "errand"
#: Execution option marking a connection that will write (``BEGIN IMMEDIATE`` on SQLite).
WRITE = "errand_write"
#: Every schema's constraint names, fixed so later migrations (and SQLite batch mode) can name them.
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


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


def open_engine(url: str | None = None) -> sa.Engine:
    """An engine on ``url`` (default: :func:`default_url`), migrated to the newest schema."""
    engine = connect(url or default_url())
    migrate(engine)
    return engine


class SqlStore:
    """The part every store on this database shares: its engine, one-transaction helpers
    (writers take SQLite's write lock up front), and closing."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        self._writer = engine.execution_options(**{WRITE: True})

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    @contextmanager
    def _write(self) -> Iterator[sa.Connection]:
        with self._writer.begin() as connection:
            yield connection

    @contextmanager
    def _read(self) -> Iterator[sa.Connection]:
        with self.engine.begin() as connection:
            yield connection


def migrate(engine: sa.Engine) -> None:
    """Upgrade the database to the newest revision; a no-op when it is there already."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    # One write transaction around the whole upgrade, under a lock: processes opening a fresh
    # store at once (serve and its workers started together) take turns, and each after the first
    # finds the schema made. SQLite's write lock, taken up front, is that lock; PostgreSQL takes
    # a transaction-scoped advisory lock (a transaction alone is not enough there: two of them
    # creating ``alembic_version`` at once, one died on a unique violation).
    with engine.execution_options(**{WRITE: True}).begin() as connection:
        if connection.dialect.name == "postgresql":
            connection.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK})
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
        # Reads come from the page cache through a mapping, shared by every connection, instead
        # of each connection copying pages into its own 2 MB cache: a BM25 search over 20,000
        # memories went from 2.2 to 1.5 ms p50 (benchmarks/memory.py's database).
        cursor.execute(f"PRAGMA mmap_size = {MMAP_BYTES}")
        cursor.close()

    @sa.event.listens_for(engine, "begin")
    def on_begin(connection: sa.Connection) -> None:
        # A writer takes the write lock up front. A deferred transaction that
        # reads and then writes can fail with SQLITE_BUSY at once when another
        # writer committed in between, and the busy timeout does not retry that.
        write = connection.get_execution_options().get(WRITE, False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")
