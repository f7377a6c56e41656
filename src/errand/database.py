"""errand's SQL database: connecting, migrating, and the transactions its stores use.

One database holds the task store and project memory. SQLite is the embedded
default; PostgreSQL takes the same schema. Migrations are Alembic revisions in
``errand/migrations`` (the one place that knows every layer's tables), recorded,
as Alembic does, in the ``alembic_version`` table; :func:`migrate` runs them in
code, with no ``alembic.ini``. This module sits beneath the layers that keep
state in the database, so each can open it without reaching up to another.
"""

from __future__ import annotations

import copy
import logging
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Self

import sqlalchemy as sa
from alembic import command
from alembic.config import Config

from errand import _settings

__all__ = ["BUSY_TIMEOUT_MS", "DEFAULT_STORE_RETRY", "NAMING_CONVENTION", "WRITE", "SqlStore", "connect",
           "default_url", "migrate", "open_engine", "store_retry_from_environment"]

log = logging.getLogger("errand.database")

MIGRATIONS = Path(__file__).parent / "migrations"
MMAP_BYTES = 1 << 30
BUSY_TIMEOUT_MS = 30_000
#: The PostgreSQL advisory lock migrations hold (any fixed 64-bit number of errand's own).
MIGRATION_LOCK = 0x6572_7261_6E64  # "errand"
#: How long, in seconds, an engine's store waits for a database that is away before an error
#: (``ERRAND_STORE_RETRY_SECONDS``): minutes, so a restart or a failover strands nothing.
DEFAULT_STORE_RETRY = 300.0
_RETRY_CEILING = 5.0  # the longest pause between two tries to reach the database, seconds
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


def store_retry_from_environment() -> float:
    """``ERRAND_STORE_RETRY_SECONDS`` (default :data:`DEFAULT_STORE_RETRY`); a clear error if it is not a
    number of seconds (0: no retry)."""
    text = os.environ.get("ERRAND_STORE_RETRY_SECONDS", "").strip()
    if not text:
        return DEFAULT_STORE_RETRY
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0:
        from errand.errors import ConfigError

        raise ConfigError(f"ERRAND_STORE_RETRY_SECONDS must be a number of seconds (0 or more), not {text!r}",
                          code="bad_store_retry")
    return seconds


def connect(url: str) -> sa.Engine:
    # A server's pooled connection is checked before use: after a database restart the pool holds
    # only dead ones, and a check turns that into a fresh connection (or an error before any work).
    # SQLite has no server to lose, and its checkouts stay free.
    engine = sa.create_engine(url, pool_pre_ping=not url.startswith("sqlite"), **_sqlite_arguments(url))
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
        self.patience = 0.0

    def patient(self, seconds: float | None = None) -> Self:
        """This store on the same engine, each of its transactions waiting up to ``seconds``
        (default ``ERRAND_STORE_RETRY_SECONDS``) for a database that cannot be reached, trying
        again and again, instead of failing at once: an engine's, whose work must not be lost to
        a database restart. A person's command keeps the impatient one, and hears at once."""
        twin = copy.copy(self)
        twin.patience = store_retry_from_environment() if seconds is None else seconds
        return twin

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    @contextmanager
    def _write(self) -> Iterator[sa.Connection]:
        with self._connection(self._writer) as connection, connection.begin():
            yield connection

    @contextmanager
    def _read(self) -> Iterator[sa.Connection]:
        with self._connection(self.engine) as connection, connection.begin():
            yield connection

    def _connection(self, engine: sa.Engine) -> sa.Connection:
        """A connection from the pool; a patient store tries until the database answers or its
        patience runs out. Only reaching the database is tried again, never a transaction's work."""
        deadline = time.monotonic() + self.patience
        pause = 0.1
        while True:
            try:
                return engine.connect()
            except (sa.exc.OperationalError, sa.exc.InterfaceError) as error:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise
                log.warning("cannot reach the database (%s); trying again for %.0f s more", error.orig, left)
                time.sleep(min(pause, left))
                pause = min(pause * 2, _RETRY_CEILING)


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


def _wal(cursor: sqlite3.Cursor) -> None:
    """Switch a database to WAL. Processes opening a fresh database at once all ask, and SQLite
    may answer "database is locked" at once, without waiting its busy timeout (seen in CI, one
    process of six): ask again, for up to that timeout."""
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            cursor.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def _configure_sqlite(engine: sa.Engine) -> None:
    @sa.event.listens_for(engine, "connect")
    def on_connect(dbapi_connection: sqlite3.Connection, _record: object) -> None:
        # Let SQLAlchemy, not the sqlite3 module, decide where transactions begin
        # (the module would otherwise run DDL outside any transaction).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        _wal(cursor)
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
