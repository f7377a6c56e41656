"""A throw-away PostgreSQL cluster from Debian's packages, for tests that run against PostgreSQL.

One cluster per test session, in a temporary directory, listening only on a Unix socket
in that directory (no TCP port to collide with anything); each test gets a database of
its own in it. PostgreSQL refuses to run as root, so as root the cluster belongs to the
``postgres`` user the Debian package creates, and its programs run through ``runuser``.
"""

from __future__ import annotations

import itertools
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import components

VERSION = "15"
BIN = Path(f"/usr/lib/postgresql/{VERSION}/bin")
USER = "errand"
_counter = itertools.count(1)


def missing() -> str | None:
    """Why no cluster can start here (None: it can)."""
    if not (BIN / "initdb").exists() or not (BIN / "pg_ctl").exists():
        return f"PostgreSQL {VERSION}'s server programs are not installed ({BIN}); `scripts/setup` installs them"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed; `scripts/setup` installs errand's dependencies"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root needs the `postgres` user (Debian's postgresql package makes it)"
    return None


@dataclass(frozen=True)
class Cluster:
    directory: Path

    @property
    def socket_dir(self) -> Path:
        return self.directory

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://{USER}@/{database}?host={self.socket_dir}"

    def sql(self, statement: str) -> None:
        import psycopg

        with psycopg.connect(host=str(self.socket_dir), user=USER, dbname="postgres", autocommit=True) as connection:
            connection.execute(statement)  # type: ignore[arg-type]

    def create_database(self) -> str:
        name = f"errand_test_{os.getpid()}_{next(_counter)}"
        self.sql(f'CREATE DATABASE "{name}"')
        return name

    def drop_database(self, name: str) -> None:
        self.sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _as_owner(command: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


def _run(*args: object) -> None:
    subprocess.run(_as_owner([str(arg) for arg in args]), check=True, capture_output=True)


def start() -> Cluster:
    directory = Path(tempfile.mkdtemp(prefix="errand-pg-"))
    if os.geteuid() == 0:
        shutil.chown(directory, "postgres", "postgres")
    data = directory / "data"
    _run(BIN / "initdb", "-D", data, "-U", USER, "-A", "trust", "-E", "UTF8", "--no-sync")
    # Only the socket in the temporary directory; fsync off since the cluster is thrown away.
    options = f"-c listen_addresses='' -k {directory} -c fsync=off -c max_connections=200"
    _run(BIN / "pg_ctl", "-D", data, "-o", options, "-l", directory / "log", "-w", "start")
    return Cluster(directory)


def stop(cluster: Cluster) -> None:
    subprocess.run(_as_owner([str(BIN / "pg_ctl"), "-D", str(cluster.directory / "data"), "-m", "immediate",
                              "-w", "stop"]), capture_output=True)
    shutil.rmtree(cluster.directory, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[Cluster]:
    components.require("postgresql")  # under CI a missing one fails the test
    cluster = start()
    try:
        yield cluster
    finally:
        stop(cluster)


@pytest.fixture
def postgres_url(postgres_cluster: Cluster) -> Iterator[str]:
    """The URL of a fresh, empty database of this test's own."""
    name = postgres_cluster.create_database()
    yield postgres_cluster.url(name)
    postgres_cluster.drop_database(name)


#: The databases a store fixture is parametrised over (PostgreSQL's tests are slow: a cluster, a database each).
DATABASES = ["sqlite", pytest.param("postgresql", marks=pytest.mark.slow)]


def on_sqlite_only(fixture: str = "url") -> pytest.MarkDecorator:
    """The mark of a test whose outcome no store decides: intake refusing bad input before anything
    is written, or a feature of the engine that reaches its store only through TaskStore (whose
    behaviour on each database the store's own tests hold). It runs on SQLite only, as a PostgreSQL
    database of its own would show nothing more. ``fixture`` names the fixture parametrised over
    :data:`DATABASES` that the test uses."""
    return pytest.mark.parametrize(fixture, ["sqlite"], indirect=True)


def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL a store fixture parametrised over :data:`DATABASES` opens."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'errand.db'}"
    return str(request.getfixturevalue("postgres_url"))
