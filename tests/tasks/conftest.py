from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.conftest import errand_home, repo, script_file, service  # noqa: F401 - shared with the engine tests
from errand.tasks.store.tasks import TaskStore
from postgres import DATABASES, database_url
from stores import migrated


@pytest.fixture(params=DATABASES)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The store's database: SQLite in the test's directory, or a fresh PostgreSQL database."""
    return database_url(request, tmp_path)


@pytest.fixture
def store(url: str) -> Iterator[TaskStore]:
    with TaskStore.open(migrated(url)) as opened:
        yield opened


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[TaskStore]:
    """A store in SQLite only: for tests whose subject is the sandbox and the environment, not the database."""
    with TaskStore.open(migrated(f"sqlite:///{tmp_path / 'errand.db'}")) as opened:
        yield opened


def store_at_revision(url: str, revision: str, *statements: str) -> None:
    """Make the database at ``url`` as an older errand left it: migrated only to ``revision``,
    with rows ``statements`` insert."""
    from alembic import command
    from alembic.config import Config

    from errand import database

    engine = database.connect(url)
    config = Config()
    config.set_main_option("script_location", str(database.MIGRATIONS))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, revision)
        for statement in statements:
            connection.exec_driver_sql(statement)
    engine.dispose()
