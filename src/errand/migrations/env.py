"""Alembic environment: migrates the connection the task store hands over.

There is no alembic.ini; :func:`errand.database.migrate` builds the config in
code and passes an open connection (already inside its transaction) as
``config.attributes["connection"]``.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection

from errand.forge.schema import metadata as forge_metadata
from errand.memory.schema import metadata as memory_metadata
from errand.tasks.store.schema import metadata


def run_migrations_online() -> None:
    connection = context.config.attributes.get("connection")
    if not isinstance(connection, Connection):
        raise RuntimeError("errand's migrations run through errand.database.migrate(), which passes a connection")
    # Batch mode lets later revisions alter tables on SQLite (which cannot ALTER most things).
    context.configure(connection=connection, target_metadata=[metadata, memory_metadata, forge_metadata],
                      render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    raise RuntimeError("errand's migrations run online only")
run_migrations_online()
