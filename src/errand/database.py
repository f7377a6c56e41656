"""errand's SQL database: connecting, migrating, and the transactions its stores use.

One database holds the task store and project memory. SQLite is the embedded
default; PostgreSQL takes the same schema. Migrations are Alembic revisions in
``errand/migrations`` (the one place that knows every layer's tables), recorded,
as Alembic does, in the ``alembic_version`` table; :func:`migrate` runs them in
code, with no ``alembic.ini``. This module sits beneath the layers that keep
state in the database, so each can open it without reaching up to another.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import inspect
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, Self, TypeGuard, TypeVar

import sqlalchemy as sa

from errand import _settings
from errand.errors import ConfigError, ErrandError

__all__ = ["BUSY_TIMEOUT_MS", "DEFAULT_STORE_RETRY", "NAMING_CONVENTION", "WRITE", "SqlStore", "StoreUnreachable",
           "connect", "default_url", "migrate", "open_engine", "outage", "patiently",
           "store_retry_from_environment", "written_as"]

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
T = TypeVar("T")
P = ParamSpec("P")
S = TypeVar("S", bound="SqlStore")
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
    try:
        home.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ConfigError(f"errand's home {home} cannot be made ({error.strerror}): set ERRAND_HOME to a directory "
                          "errand may write", code="invalid_config") from None
    return f"sqlite:///{home / 'errand.db'}"


MAX_STORE_RETRY = 86_400.0


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
    # Bounded: a database away for longer is an outage a person must see (a task waiting on it
    # forever is stranded), and the engine's timers cannot hold infinity.
    if not 0 <= seconds <= MAX_STORE_RETRY:
        raise ConfigError(f"ERRAND_STORE_RETRY_SECONDS must be a number of seconds from 0 to {MAX_STORE_RETRY:.0f} "
                          f"(a day), not {text!r}", code="bad_store_retry")
    return seconds


def connect(url: str) -> sa.Engine:
    # A server's pooled connection is checked before use: after a database restart the pool holds
    # only dead ones, and a check turns that into a fresh connection (or an error before any work).
    # SQLite has no server to lose, and its checkouts stay free.
    try:
        engine = sa.create_engine(url, pool_pre_ping=not url.startswith("sqlite"), **_sqlite_arguments(url))
    except (sa.exc.ArgumentError, sa.exc.NoSuchModuleError) as error:
        shown = sa.engine.make_url(url).render_as_string(hide_password=True) if "://" in url else url
        raise ConfigError(f"the database URL {shown!r} is not one errand can use ({error}): errand takes "
                          "sqlite:///PATH or postgresql://USER@HOST/DATABASE", code="invalid_config") from None
    if engine.dialect.name == "sqlite":
        _configure_sqlite(engine)
    return engine


class StoreUnreachable(ErrandError, sa.exc.SQLAlchemyError):
    """The database could not be reached (for ``seconds``, a patient store's retry time), or the
    connection to it was lost in a transaction (``lost``: nothing of that transaction was kept).
    Still an :class:`sqlalchemy.exc.SQLAlchemyError`, so whatever waits out the database's errors
    waits this one out too."""

    code = "store_unreachable"

    def __init__(self, message: str, *, seconds: float = 0.0, lost: bool = False) -> None:
        super().__init__(message)
        self.seconds = seconds
        self.lost = lost

    def __str__(self) -> str:
        return self.message

    @classmethod
    def of(cls, engine: sa.Engine, error: sa.exc.DBAPIError, seconds: float = 0.0, *,
           lost: bool | None = None) -> StoreUnreachable:
        """``lost``: whether nothing of the transaction was kept (by default, when it went in a statement)."""
        where = engine.url.render_as_string(hide_password=True)
        said = " ".join(str(error.orig).split()) or type(error.orig).__name__
        if lost is None:
            lost = error.connection_invalidated and error.statement is not None
        if error.connection_invalidated:
            if lost:
                return cls(f"the connection to the database {where} was lost ({said})", seconds=seconds, lost=True)
            if error.statement is None:  # in the commit, and no word since of what became of it
                return cls(f"the connection to the database {where} was lost as a write was committed ({said}), "
                           "and the database has not said since whether it was kept", seconds=seconds)
        if refused_by_the_server(error):
            return cls(f"the database {where} refused errand ({said}): check ERRAND_DATABASE_URL")
        tried = f" for {seconds:.0f} s" if seconds >= 1 else ""
        if engine.dialect.name == "sqlite":
            ask = "; does its directory exist, and may errand write there?"
        else:
            ask = "" if "running" in said else "; is it running?"  # PostgreSQL's own message asks already
        return cls(f"the database {where} could not be reached{tried} ({said}){ask}", seconds=seconds)


# What a running server answers a connection whose URL is wrong (PostgreSQL's messages: the driver
# gives no SQLSTATE for them): waiting does not make the database or the role appear.
_REFUSALS = ("does not exist", "password authentication failed", "no pg_hba.conf entry")


def refused_by_the_server(error: sa.exc.DBAPIError) -> bool:
    """Whether a running server refused the connection for what the URL says (a database or a role
    that does not exist, a wrong password): not an outage to wait out."""
    said = str(error.orig)
    return error.statement is None and "FATAL:" in said and any(refusal in said for refusal in _REFUSALS)


def outage(error: BaseException) -> StoreUnreachable | None:
    """``error`` as the database being away (unreachable, or its connection lost in a transaction),
    else None: an error of the statement or of the data is not an outage."""
    if isinstance(error, StoreUnreachable):
        return error
    if not isinstance(error, sa.exc.DBAPIError):
        return None
    # SQLite has no server to lose (its "database is locked" in a statement is its busy answer), but
    # its file can be missing for a while, as a server can be down.
    lost = error.connection_invalidated and not isinstance(error.orig, sqlite3.Error)
    unreached = error.statement is None and isinstance(error, (sa.exc.OperationalError, sa.exc.InterfaceError))
    if not (lost or unreached):
        return None
    return StoreUnreachable(f"the database was unreachable ({' '.join(str(error.orig).split())})", lost=lost)


def open_engine(url: str | None = None, *, patience: float = 0.0) -> sa.Engine:
    """An engine on ``url`` (default: :func:`default_url`), migrated to the newest schema. It waits
    up to ``patience`` seconds for a database that cannot be reached, then raises
    :class:`StoreUnreachable` (at once with none)."""
    engine = connect(url or default_url())
    tries = _Patience(patience)
    while True:
        try:
            migrate(engine)
            return engine
        except (sa.exc.OperationalError, sa.exc.InterfaceError) as error:
            away = outage(error)
            if away is None:
                raise
            if refused_by_the_server(error) or not tries.wait(error):
                engine.dispose()
                raise StoreUnreachable.of(engine, error, patience) from None


class SqlStore:
    """The part every store on this database shares: its engine, one-transaction helpers
    (writers take SQLite's write lock up front), and closing.

    A patient store (:meth:`patient`) waits out a database that is away: each of its public
    methods (a subclass's) is tried again, whole, while the database cannot be reached or the
    connection is lost in its transaction, until the store's patience runs out; then
    :class:`StoreUnreachable` says so."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        self._writer = engine.execution_options(**{WRITE: True})
        self.patience = 0.0

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name, member in list(vars(cls).items()):
            if not name.startswith("_") and inspect.isfunction(member) \
                    and not (inspect.iscoroutinefunction(member) or inspect.isgeneratorfunction(member)):
                setattr(cls, name, patiently(member))

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
        with self._transaction(self._writer) as connection:
            yield connection

    @contextmanager
    def _read(self) -> Iterator[sa.Connection]:
        with self._transaction(self.engine) as connection:
            yield connection

    @contextmanager
    def _transaction(self, engine: sa.Engine) -> Iterator[sa.Connection]:
        asks = engine is self._writer and engine.dialect.name == "postgresql"
        with self._connection(engine) as connection:
            connection.info.pop(_WRITTEN, None)  # what an earlier transaction on this connection said
            transaction = connection.begin()
            try:
                yield connection
                # What to ask about should the connection go during the commit: this transaction's id, if
                # it wrote anything, and the server process that holds it (see _kept). A statement of the
                # transaction may have said them already (written_as), sparing a round trip.
                written = connection.info.pop(_WRITTEN, None) if asks else None
                if asks and written is None:
                    written = tuple(connection.execute(
                        sa.text("SELECT txid_current_if_assigned(), pg_backend_pid()")).one())
            except BaseException as error:
                with contextlib.suppress(sa.exc.SQLAlchemyError):
                    transaction.rollback()
                if _went(error):  # the database went away in the transaction (stopped, restarted, failed over)
                    raise StoreUnreachable.of(self.engine, error) from error
                raise
            try:
                transaction.commit()
            except sa.exc.DBAPIError as error:
                if not _went(error):
                    raise
                if engine is not self._writer or (written is not None and written[0] is None):
                    return  # a read, or a write that wrote nothing: nothing to keep, and what it read stands
                kept = None if written is None else self._kept(written[0], written[1])
                if kept:
                    return  # the commit was kept, only its answer lost: what the caller made of it stands
                raise StoreUnreachable.of(self.engine, error, lost=kept is False) from error

    def _kept(self, xid: int, pid: int) -> bool | None:
        """Whether the transaction ``xid``, whose connection went during its commit, was committed (False:
        it was not, and nothing of it was kept), asked on a new connection for as long as this store
        waits for its database (two seconds at least); None if no answer came in that time.

        Its server process (``pid``) may not have seen the connection go: a network that drops packets
        tells it nothing for hours, and the transaction stays in progress, holding its locks. Such a
        process is ended, which ends a transaction that is not committing; one that is commits first."""
        patience = getattr(_trying, "patience", None) or _Patience(self.patience)
        deadline = max(patience.deadline, time.monotonic() + _KEPT_AT_LEAST)
        pause = 0.01
        while True:
            try:
                with self.engine.connect() as connection:
                    status = connection.execute(sa.text("SELECT txid_status(:xid)"), {"xid": xid}).scalar()
                    if status == "in progress":
                        connection.execute(sa.text(
                            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                            " WHERE pid = :pid AND backend_xid::text = :xid"), {"pid": pid, "xid": str(xid % 2**32)})
            except (sa.exc.OperationalError, sa.exc.InterfaceError) as error:
                if outage(error) is None or not patience.wait(error):
                    return None
                continue
            except sa.exc.DBAPIError:  # an id this server has not reached (another's, failed over), or no right
                return None
            if status != "in progress":
                return None if status is None else status == "committed"  # None: too old to know
            if time.monotonic() >= deadline:
                return None
            time.sleep(pause)
            pause = min(pause * 2, 1.0)

    def _connection(self, engine: sa.Engine) -> sa.Connection:
        """A connection from the pool; a patient store tries until the database answers or its
        patience runs out (that of the method being tried, if one is)."""
        patience = getattr(_trying, "patience", None) or _Patience(self.patience)
        while True:
            try:
                return engine.connect()
            except (sa.exc.OperationalError, sa.exc.InterfaceError) as error:
                if outage(error) is None:
                    raise
                if not patience.wait(error):
                    raise StoreUnreachable.of(self.engine, error, patience.seconds) from None


#: The key of :func:`written_as`'s word in a connection's ``info``.
_WRITTEN = "errand_written"


def written_as(connection: sa.Connection, xid: int, pid: int) -> None:
    """Say that the transaction in progress on ``connection`` has written, with the id ``xid``
    (``txid_current()``), on the server process ``pid``: what a store's write transaction asks before
    it commits, so a statement that had them answered anyway spares that round trip. Said by a
    transaction a store did not begin, it is forgotten as the next one begins."""
    connection.info[_WRITTEN] = (xid, pid)


def _went(error: BaseException) -> TypeGuard[sa.exc.DBAPIError]:
    """Whether ``error`` says the transaction's connection went."""
    return isinstance(error, sa.exc.DBAPIError) and error.connection_invalidated and outage(error) is not None


#: Seconds the fate of a commit whose answer was lost is asked about, whatever the store's patience.
_KEPT_AT_LEAST = 2.0


class _Patience:
    """How long to go on trying to reach the database, and the pause before the next try."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.deadline = time.monotonic() + seconds
        self.pause = 0.1

    def wait(self, error: BaseException) -> bool:
        """Pause before the next try (False: no time is left for one)."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            return False
        said = error.orig if isinstance(error, sa.exc.DBAPIError) else error
        log.warning("cannot reach the database (%s); trying again for %.0f s more", " ".join(str(said).split()),
                    left)
        time.sleep(min(self.pause, left))
        self.pause = min(self.pause * 2, _RETRY_CEILING)
        return True


_trying = threading.local()  # the patience of the patient store's method being tried on this thread


def patiently(method: Callable[Concatenate[S, P], T]) -> Callable[Concatenate[S, P], T]:
    """``method`` (a store's, or a function whose first argument is the store) tried again, whole,
    while a patient store's database is away; every public method of a store is so. The transaction
    that failed was rolled back, so trying again makes it once; but a method of several transactions
    makes those before it again. A write whose connection went during its commit
    is asked about first (PostgreSQL's ``txid_status``): kept, what the method made of it is
    returned; not kept, the method is tried again; no word within the store's patience, it is not."""
    @functools.wraps(method)
    def tried(store: S, /, *args: P.args, **kwargs: P.kwargs) -> T:
        if not store.patience or getattr(_trying, "patience", None) is not None:
            return method(store, *args, **kwargs)  # impatient, or called by a method being tried
        _trying.patience = patience = _Patience(store.patience)
        try:
            while True:
                try:
                    return method(store, *args, **kwargs)
                except StoreUnreachable as error:
                    if not error.lost or not patience.wait(error):
                        raise
                except sa.exc.DBAPIError as error:  # one of its transactions took a connection of its own
                    if outage(error) is None:
                        raise
                    if not patience.wait(error):
                        raise StoreUnreachable.of(store.engine, error, patience.seconds) from error
        finally:
            _trying.patience = None

    return tried


def migrate(engine: sa.Engine) -> None:
    """Upgrade the database to the newest revision; a no-op when it is there already.

    A database at :func:`head` is found so with one query: Alembic's check of an up-to-date
    database cost each process that opened a store 0.26–0.33 s of CPU (importing it, reading
    every migration script), a quarter of what a CLI command costs."""
    revision = _revision(engine)
    if revision == head():
        return
    _refuse_newer(engine, revision)
    from alembic import command
    from alembic.config import Config

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
        # Again under the lock: a newer errand may have migrated it while this one waited.
        _refuse_newer(engine, connection.execute(sa.text("SELECT max(version_num) FROM alembic_version")).scalar()
                      if sa.inspect(connection).has_table("alembic_version") else None)
        config.attributes["connection"] = connection
        command.upgrade(config, "head")


def _refuse_newer(engine: sa.Engine, revision: str | None) -> None:
    """Refuse a database whose schema a newer errand made: this one would not know its tables (a
    machine upgraded before the others, or a downgrade), and Alembic would only say it cannot find
    the revision."""
    if revision is None or revision <= head():
        return
    where = engine.url.render_as_string(hide_password=True)
    raise ConfigError(f"the database {where} was set up by a newer errand (its schema is revision {revision}; this "
                      f"errand knows up to {head()}): upgrade errand here, as every machine sharing the database "
                      "runs the same version", code="newer_database")


@functools.cache
def head() -> str:
    """The newest revision: the highest of the migration scripts' numbers (each script's file
    begins with its revision, ``0011_round_claims.py``; a test holds Alembic to the same)."""
    return max(path.name.split("_", 1)[0] for path in (MIGRATIONS / "versions").glob("[0-9]*_*.py"))


def _revision(engine: sa.Engine) -> str | None:
    """The database's revision, or None where it has none yet (a new database) or not one (two
    rows: Alembic says what is wrong)."""
    with engine.connect() as connection:
        if not sa.inspect(connection).has_table("alembic_version"):
            return None
        revisions = connection.execute(sa.text("SELECT version_num FROM alembic_version")).scalars().all()
    return revisions[0] if len(revisions) == 1 else None


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
