"""tests/stores.py: a new store's file is a copy of one the migrations made, at head, and its own."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import stores
from errand.database import head


def _revision(path: Path) -> str:
    with sqlite3.connect(path) as connection:
        return str(connection.execute("SELECT version_num FROM alembic_version").fetchone()[0])


def test_a_new_sqlite_store_is_a_copy_at_head_and_its_own(tmp_path: Path) -> None:
    first, second = tmp_path / "first.db", tmp_path / "second.db"
    assert stores.migrated(f"sqlite:///{first}") == f"sqlite:///{first}"
    stores.migrated(f"sqlite:///{second}")
    assert _revision(first) == _revision(second) == head()
    with sqlite3.connect(first) as connection:
        connection.execute("UPDATE alembic_version SET version_num = 'mine'")
    assert _revision(second) == head()  # a copy, not the same file


def test_a_file_already_there_and_another_database_are_left_as_they_are(tmp_path: Path) -> None:
    there = tmp_path / "there.db"
    there.write_bytes(b"")
    stores.migrated(f"sqlite:///{there}")
    assert there.read_bytes() == b""
    url = "postgresql+psycopg://errand@/db?host=/nonexistent"
    assert stores.migrated(url) == url


def test_a_template_removed_under_the_session_is_made_again(tmp_path: Path) -> None:
    stores.migrated(f"sqlite:///{tmp_path / 'first.db'}")
    assert stores._template is not None
    stores._template.unlink()  # a clean-up of the temporary directory, mid-session
    stores.migrated(f"sqlite:///{tmp_path / 'second.db'}")
    assert _revision(tmp_path / "second.db") == head()
