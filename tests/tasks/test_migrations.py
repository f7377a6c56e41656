from __future__ import annotations

import logging
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
import sqlalchemy.exc

from errand.tasks.store.tasks import TaskStore

from .conftest import store_at_revision


def _head() -> str:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    from errand.database import MIGRATIONS

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    head = ScriptDirectory.from_config(config).get_current_head()
    assert head is not None
    return head


def test_open_creates_the_schema_and_records_the_revision(tmp_path: Path) -> None:
    path = tmp_path / "errand.db"
    TaskStore.open(f"sqlite:///{path}").close()
    with sqlite3.connect(path) as db:
        tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert {"tasks", "runs", "events", "reviews", "alembic_version"} <= tables
        assert db.execute("SELECT version_num FROM alembic_version").fetchall() == [(_head(),)]
        assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)


def test_reopening_runs_no_migration_and_keeps_data(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    url = f"sqlite:///{tmp_path / 'errand.db'}"
    with caplog.at_level(logging.INFO, logger="alembic"), TaskStore.open(url) as store:
        task = store.create_task(title="t", instruction="i", repo="/r")
    assert "Running upgrade" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="alembic"), TaskStore.open(url) as store:
        assert store.get_task(task.id) == task
    assert "Running upgrade" not in caplog.text


def test_the_head_errand_checks_a_database_against_is_alembics(tmp_path: Path) -> None:
    from errand.database import head

    assert head() == _head()


def test_a_process_opening_an_up_to_date_store_does_not_load_alembic(tmp_path: Path) -> None:
    # Alembic's own check of an up-to-date database cost every process that opened a store ~0.3 s of CPU.
    url = f"sqlite:///{tmp_path / 'errand.db'}"
    store_at_revision(url, "0010")
    probe = ("import sys\nfrom errand.tasks.store.tasks import TaskStore\n"
             f"TaskStore.open({url!r}).close()\nprint('alembic' in sys.modules)\n")
    opened = [subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
              for _ in range(2)]
    assert opened == ["True\n", "False\n"]  # the first brought it from 0010 to the head; the second found it there
    with sqlite3.connect(tmp_path / "errand.db") as db:
        assert db.execute("SELECT version_num FROM alembic_version").fetchall() == [(_head(),)]


def test_default_location_is_errand_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ERRAND_HOME", str(tmp_path / "home"))
    with TaskStore.open() as store:
        store.create_task(title="t", instruction="i", repo="/r")
    assert (tmp_path / "home" / "errand.db").is_file()


def test_foreign_keys_are_enforced(store: TaskStore) -> None:
    from errand.tasks.errors import TaskNotFound

    with pytest.raises(TaskNotFound):
        store.start_run("t-missing", "w")
    with pytest.raises(sqlalchemy.exc.IntegrityError, match=r"(?i)foreign key"):
        store.create_task(title="t", instruction="i", repo="/r", parent_id="t-missing")


def test_the_migrations_build_exactly_the_schema_modules(store: TaskStore) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    from errand.forge.schema import metadata as forge_metadata
    from errand.memory.schema import FTS_TABLE
    from errand.memory.schema import metadata as memory_metadata
    from errand.tasks.store.schema import metadata

    # The FTS5 index (and its shadow tables) is SQLite-only and made by raw DDL, so no metadata holds it.
    options = {"include_name": lambda name, kind, _parent: not (kind == "table" and str(name).startswith(FTS_TABLE))}
    with store.engine.connect() as connection:
        context = MigrationContext.configure(connection, opts=options)
        assert compare_metadata(context, sa.MetaData()) != []  # the check can fail
        combined = sa.MetaData()
        for table in [*metadata.tables.values(), *memory_metadata.tables.values(), *forge_metadata.tables.values()]:
            table.to_metadata(combined)
        assert compare_metadata(context, combined) == []


def test_a_version_1_store_upgrades_keeping_its_runs(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'errand.db'}"
    store_at_revision(url, "0001",
                      "INSERT INTO tasks (id, title, instruction, repo, base_ref, attempts, state, created_at, "
                      "updated_at) VALUES ('t-1', 't', 'i', '/r', 'HEAD', 1, 'running', 1, 1)",
                      "INSERT INTO runs (id, task_id, attempt, state, worker, started_at) "
                      "VALUES ('t-1-r1', 't-1', 1, 'running', 'w', 1)")
    with TaskStore.open(url) as store:
        [run] = store.runs("t-1")
        assert (run.attempt, run.round) == (1, 1)
        assert store.start_run("t-1", "w").round == 2


def test_the_database_url_can_come_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ERRAND_DATABASE_URL", f"sqlite:///{tmp_path / 'elsewhere.db'}")
    with TaskStore.open() as store:
        store.create_task(title="t", instruction="i", repo="/r")
    assert (tmp_path / "elsewhere.db").is_file()


def test_the_word_vector_table_migrates_up_and_down_keeping_the_memories(url: str) -> None:
    from alembic import command
    from alembic.config import Config

    from errand import database

    store_at_revision(url, "0006",
                      "INSERT INTO memories (project, kind, text, status, source, confidence, created_at, updated_at, "
                      "use_count, evidence, fingerprint, citations) VALUES ('/r', 'fact', 'Deploys run on Fridays.', "
                      "'active', 'person', 1, 1, 1, 0, 1, 'f', '[]')")
    engine = database.connect(url)
    config = Config()
    config.set_main_option("script_location", str(database.MIGRATIONS))

    def tables() -> set[str]:
        with engine.connect() as connection:
            return set(sa.inspect(connection).get_table_names())

    def move(to: str) -> None:
        with engine.begin() as connection:
            config.attributes["connection"] = connection
            (command.upgrade if to == "0007" else command.downgrade)(config, to)

    assert "memory_words" not in tables()
    move("0007")
    assert "memory_words" in tables()
    with engine.begin() as connection:
        insert = "INSERT INTO memory_words (model, word, vector) VALUES ('m', 'deploys', 'x')"
        connection.exec_driver_sql(insert)
        with pytest.raises(sqlalchemy.exc.IntegrityError), connection.begin_nested():  # one row a model and word
            connection.exec_driver_sql(insert)
    move("0006")
    assert "memory_words" not in tables()
    move("0007")
    with engine.connect() as connection:
        assert connection.exec_driver_sql("SELECT text FROM memories").scalars().all() == ["Deploys run on Fridays."]
        assert connection.exec_driver_sql("SELECT count(*) FROM memory_words").scalar() == 0
    engine.dispose()


def test_a_database_with_two_revisions_is_refused_as_alembic_refuses_it(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'errand.db'}"
    TaskStore.open(url).close()
    with sqlite3.connect(tmp_path / "errand.db") as db:
        db.execute("INSERT INTO alembic_version VALUES ('0010')")  # the head's row first, another after
    with pytest.raises(Exception, match=r"0010|overlap"):
        TaskStore.open(url).close()
