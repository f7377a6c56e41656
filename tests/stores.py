"""New SQLite stores for tests, each a copy of one the migrations made once in this process.

Migrating a new SQLite file to the head revision took ~35–100 ms of CPU, and was about a quarter of
the CPU of the tests that run tasks in-process (py-spy over tests/tasks/test_service.py,
tests/tasks/test_local.py and tests/engine/test_engine.py). A store fixture that wants a store at
head, not a migration, copies the file the migrations made instead: the same schema, made by the
same code, once. Tests of the migrations themselves open their own files and migrate them.
"""

from __future__ import annotations

import atexit
import shutil
import sqlite3
import tempfile
import threading
from pathlib import Path

_lock = threading.Lock()
_template: Path | None = None


def migrated(url: str) -> str:
    """``url`` itself; where it names a SQLite file that does not exist yet, that file is first made a
    copy of a database at the head revision."""
    if not url.startswith("sqlite:///"):
        return url
    path = Path(url.removeprefix("sqlite:///"))
    if not path.exists():
        shutil.copyfile(_made(), path)
    return url


def _made() -> Path:
    global _template
    with _lock:
        if _template is None or not _template.exists():  # made once; again if something removed it
            from errand.tasks.store.tasks import TaskStore

            directory = Path(tempfile.mkdtemp(prefix="errand-store-template-"))
            atexit.register(shutil.rmtree, directory, ignore_errors=True)
            made = directory / "errand.db"
            TaskStore.open(f"sqlite:///{made}").close()
            with sqlite3.connect(made) as connection:  # all of it in the one file (WAL checkpointed)
                connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            _template = made
        return _template
