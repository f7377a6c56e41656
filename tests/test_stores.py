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
