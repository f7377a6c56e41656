"""The memory store's tables as the migrations make them: the values each column admits are the
records' own, a memory's vectors and uses go with it, and supersession links are let go, not left
dangling."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import sqlalchemy as sa

from errand import migrations
from errand.memory import Kind, MemoryStore, Provenance, Source, Status
from errand.memory.schema import KINDS, SOURCES, STATUSES, memories, memory_uses


def test_migration_makes_the_tables_and_the_fts_index(store: MemoryStore, url: str) -> None:
    path = url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as db:
        names = {name for (name,) in db.execute("SELECT name FROM sqlite_master")}
        assert {"memories", "memory_vectors", "memory_uses", "memory_projects", "memories_fts"} <= names
        # Migrated to the newest revision, whatever later migrations add.
        newest = max(path.name[:4] for path in (Path(migrations.__file__).parent / "versions").glob("0*.py"))
        assert db.execute("SELECT version_num FROM alembic_version").fetchall() == [(newest,)]


def test_the_values_each_column_admits_are_those_of_the_records() -> None:
    def listed(values: str) -> set[str]:
        return {value.strip(" '") for value in values.split(",")}

    assert listed(KINDS) == {kind.value for kind in Kind}
    assert listed(STATUSES) == {status.value for status in Status}
    assert listed(SOURCES) == {source.value for source in Source}


ROW = {"project": "/r", "kind": "fact", "text": "t", "status": "active", "source": "person", "confidence": 1.0,
       "created_at": 1.0, "updated_at": 1.0, "fingerprint": "f", "citations": []}


@pytest.mark.parametrize("bad", [{"kind": "rumour"}, {"status": "deleted"}, {"source": "gossip"}])
def test_the_database_itself_refuses_a_value_no_record_has(lexical_store: MemoryStore, bad: dict[str, str]) -> None:
    with pytest.raises(sa.exc.IntegrityError), lexical_store.engine.begin() as connection:
        connection.execute(memories.insert().values(**{**ROW, **bad}))
    with lexical_store.engine.connect() as connection:
        assert connection.execute(sa.select(sa.func.count()).select_from(memories)).scalar() == 0


def test_a_removed_memory_takes_its_uses_and_lets_go_of_the_one_it_superseded(lexical_store: MemoryStore) -> None:
    old = lexical_store.add("/r", "Docs build with make docs.", kind="command", provenance=Provenance.person())
    new = lexical_store.add("/r", "Docs build with mkdocs build.", kind="command", provenance=Provenance.person(),
                            supersedes=old.id)
    lexical_store.record_use("t-1", [new.id], how="used")
    with lexical_store.engine.begin() as connection:
        assert len(connection.execute(sa.select(memory_uses)).all()) == 1
        connection.execute(memories.delete().where(memories.c.id == new.id))
        assert connection.execute(sa.select(memory_uses)).all() == []
        superseded_by = connection.execute(sa.select(memories.c.superseded_by).where(memories.c.id == old.id))
        assert superseded_by.scalar() is None
