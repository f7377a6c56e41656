"""The migrations' environment: it migrates only the connection errand.database hands it, online, to
the tables of the task store, the memory store and the forge together."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.config import Config

from errand import database
from errand.forge.schema import metadata as forge_metadata
from errand.memory.schema import metadata as memory_metadata
from errand.tasks.store.schema import metadata as task_metadata


def config() -> Config:
    made = Config(stdout=io.StringIO())
    made.set_main_option("script_location", str(database.MIGRATIONS))
    return made


def tables(url: str) -> set[str]:
    engine = sa.create_engine(url)
    try:
        return set(sa.inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_a_migration_without_errand_s_connection_is_refused_and_creates_nothing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'errand.db'}"
    made = config()
    made.set_main_option("sqlalchemy.url", url)  # what a bare `alembic upgrade` would go by
    with pytest.raises(RuntimeError, match=r"errand\.database\.migrate\(\)"):
        command.upgrade(made, "head")
    assert tables(url) == set()


def test_offline_sql_is_refused() -> None:
    with pytest.raises(RuntimeError, match="online only"):
        command.upgrade(config(), "head", sql=True)


def test_one_migration_brings_the_tables_of_every_layer_and_a_second_changes_nothing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'errand.db'}"
    engine = database.connect(url)
    try:
        database.migrate(engine)
        wanted = {*task_metadata.tables, *memory_metadata.tables, *forge_metadata.tables, "alembic_version"}
        made = tables(url)
        assert wanted <= made and {"tasks", "memories"} <= made and forge_metadata.tables
        with engine.connect() as connection:
            revision = connection.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()
        database.migrate(engine)
        with engine.connect() as connection:
            assert connection.execute(sa.text("SELECT version_num FROM alembic_version")).all() == [(revision,)]
    finally:
        engine.dispose()
