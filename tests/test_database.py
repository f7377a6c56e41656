"""errand's SQL database: where it is, SQLite set up for several processes, migrations run once, and a
store's patience read from the environment."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest
import sqlalchemy as sa

import forkserver
from errand.database import (
    BUSY_TIMEOUT_MS,
    DEFAULT_STORE_RETRY,
    WRITE,
    SqlStore,
    connect,
    default_url,
    head,
    migrate,
    open_engine,
    store_retry_from_environment,
)
from errand.errors import ConfigError


def test_the_url_comes_from_the_environment_else_the_home_s_sqlite_file(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ERRAND_DATABASE_URL", "  postgresql://errand@db.invalid/errand \n")
    assert default_url() == "postgresql://errand@db.invalid/errand"
    monkeypatch.setenv("ERRAND_DATABASE_URL", "  ")
    monkeypatch.setenv("ERRAND_HOME", str(tmp_path / "new" / "home"))
    assert default_url() == f"sqlite:///{tmp_path / 'new' / 'home' / 'errand.db'}"
    assert (tmp_path / "new" / "home").is_dir()  # made, so SQLite can create the file in it


@pytest.mark.parametrize(("value", "seconds"), [(None, DEFAULT_STORE_RETRY), ("", DEFAULT_STORE_RETRY),
                                                ("0", 0.0), (" 12.5 ", 12.5)])
def test_a_store_s_patience_from_the_environment(monkeypatch: pytest.MonkeyPatch, value: str | None,
                                                 seconds: float) -> None:
    if value is None:
        monkeypatch.delenv("ERRAND_STORE_RETRY_SECONDS", raising=False)
    else:
        monkeypatch.setenv("ERRAND_STORE_RETRY_SECONDS", value)
    assert store_retry_from_environment() == seconds


@pytest.mark.parametrize("value", ["soon", "-1", "nan", "5 minutes", "inf", "86401"])
def test_a_patience_that_is_not_seconds_is_refused(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("ERRAND_STORE_RETRY_SECONDS", value)
    with pytest.raises(ConfigError) as caught:
        store_retry_from_environment()
    assert caught.value.code == "bad_store_retry" and repr(value) in caught.value.message


def test_sqlite_is_set_up_for_several_processes(tmp_path: Path) -> None:
    engine = connect(f"sqlite:///{tmp_path / 'errand.db'}")
    with engine.connect() as connection:
        pragma = {name: connection.exec_driver_sql(f"PRAGMA {name}").scalar()
                  for name in ("journal_mode", "foreign_keys", "busy_timeout", "synchronous")}
    assert pragma == {"journal_mode": "wal", "foreign_keys": 1, "busy_timeout": BUSY_TIMEOUT_MS, "synchronous": 1}
    engine.dispose()


def test_a_writer_takes_sqlite_s_write_lock_when_it_begins(tmp_path: Path) -> None:
    path = tmp_path / "errand.db"
    engine = connect(f"sqlite:///{path}")
    other = sqlite3.connect(path, timeout=0, isolation_level=None)
    with engine.connect() as reading, reading.begin():
        other.execute("BEGIN IMMEDIATE")  # a reader holds no write lock
        other.execute("ROLLBACK")
    with (engine.execution_options(**{WRITE: True}).connect() as writing, writing.begin(),
          pytest.raises(sqlite3.OperationalError, match="locked")):
        other.execute("BEGIN IMMEDIATE")  # before the writer has written anything
    other.execute("BEGIN IMMEDIATE")
    other.execute("ROLLBACK")
    other.close()
    engine.dispose()


def test_migrating_twice_is_once(tmp_path: Path) -> None:
    engine = open_engine(f"sqlite:///{tmp_path / 'errand.db'}")
    with engine.connect() as connection:
        head = connection.execute(sa.text("SELECT version_num FROM alembic_version")).scalars().all()
        tables = set(sa.inspect(connection).get_table_names())
    migrate(engine)
    with engine.connect() as connection:
        assert connection.execute(sa.text("SELECT version_num FROM alembic_version")).scalars().all() == head
        assert set(sa.inspect(connection).get_table_names()) == tables
    assert len(head) == 1 and {"tasks", "memories"} <= tables
    engine.dispose()


def test_a_patient_store_is_a_twin_on_the_same_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ERRAND_STORE_RETRY_SECONDS", "42")
    with SqlStore(connect(f"sqlite:///{tmp_path / 'errand.db'}")) as store:
        patient, explicit = store.patient(), store.patient(3.5)
        assert (store.patience, patient.patience, explicit.patience) == (0.0, 42.0, 3.5)
        assert patient.engine is store.engine is explicit.engine


@pytest.mark.parametrize("url", ["notadb://errand:hunter2@db.internal/errand", "garbage"])
def test_a_database_url_errand_cannot_use_is_one_clear_error_without_its_password(url: str) -> None:
    """It was a traceback through SQLAlchemy's plugin loader (a red team's find)."""
    with pytest.raises(ConfigError) as refused:
        connect(url)
    assert refused.value.code == "invalid_config" and "hunter2" not in refused.value.message
    assert "errand takes sqlite:///PATH or postgresql://" in refused.value.message


def test_a_home_that_cannot_be_made_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ERRAND_DATABASE_URL", raising=False)
    monkeypatch.setenv("ERRAND_HOME", "/proc/errand-cannot-be-here")
    with pytest.raises(ConfigError) as refused:
        default_url()
    assert "set ERRAND_HOME" in refused.value.message and "/proc/errand-cannot-be-here" in refused.value.message


def test_a_database_a_newer_errand_set_up_is_refused_in_one_line_and_left_as_it_is(tmp_path: Path) -> None:
    """A machine not upgraded yet, beside others that were: Alembic alone would only say it cannot find
    the revision, in a traceback."""
    url = f"sqlite:///{tmp_path / 'errand.db'}"
    open_engine(url).dispose()
    newer = f"{int(head()) + 1:04d}"
    with sqlite3.connect(tmp_path / "errand.db") as connection:
        connection.execute("UPDATE alembic_version SET version_num = ?", (newer,))
    with pytest.raises(ConfigError) as refused:
        open_engine(url)
    assert refused.value.code == "newer_database"
    assert f"revision {newer}; this errand knows up to {head()}" in refused.value.message
    shown = forkserver.run(["ls"], env={**os.environ, "ERRAND_DATABASE_URL": url,
                                         "ERRAND_HOME": str(tmp_path / "home")})
    assert shown.returncode != 0 and shown.stderr.startswith("error: the database") and "Traceback" not in shown.stderr
    assert "set up by a newer errand" in shown.stderr and len(shown.stderr.strip().splitlines()) == 1, shown.stderr
    with sqlite3.connect(tmp_path / "errand.db") as connection:
        assert connection.execute("SELECT version_num FROM alembic_version").fetchall() == [(newer,)]
