"""A loopback GitHub with one repository (a real project, its remote served over git's smart
HTTP), an errand home whose forge.toml points at it, and the token in the environment."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from engine.cli import script, stop_worker
from engine.harness import make_repo
from polling import until
from server.conftest import Served, artifacts, browser, start_server  # noqa: F401 - fixtures of the batch page's browser check

from .fakegithub import FakeGitHub

TOKEN = "ghp_fakeTokenThatMustNeverLeak0123456789"
SECRET = "webhook-secret-for-tests"
REPO = "acme/calc"


@dataclass
class Forged:
    fake: FakeGitHub
    project: Path  # the local clone tasks run on and accept into
    home: Path

    @property
    def env(self) -> dict[str, str]:
        return {"ERRAND_HOME": str(self.home), "GITHUB_TOKEN": TOKEN, "ERRAND_WEBHOOK_SECRET": SECRET,
                "ERRAND_FORGE_SYNC": "0.2"}


@pytest.fixture
def forged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Forged]:
    fake = FakeGitHub(tmp_path / "github", token=TOKEN, webhook_secret=SECRET).start()
    project = make_repo(tmp_path / "calc")
    fake.add_repo(REPO, project)
    home = tmp_path / "home"
    home.mkdir()
    (home / "forge.toml").write_text(f'[github]\nbase_url = "{fake.api_url}"\n\n'
                                     f'[github.repos."{REPO}"]\npath = "{project}"\n')
    forged = Forged(fake, project, home)
    for key, value in forged.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("ERRAND_DATABASE_URL", raising=False)
    try:
        yield forged
    finally:
        stop_worker(home)
        fake.stop()


def files_holding(root: Path, secret: str) -> list[str]:
    """Every file under ``root`` whose bytes contain ``secret`` (or its base64 in a header)."""
    import base64

    needles = [secret.encode(), base64.b64encode(f"x-access-token:{secret}".encode())]
    found = []
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            try:
                data = written_bytes(path)
            except OSError:
                continue
            if any(needle in data for needle in needles):
                found.append(str(path))
    return found


def written_bytes(path: Path) -> bytes:
    """A file's bytes without its holes, which read as zeros and hold nothing. The home's sandbox
    disk template is a sparse 4 GiB file with a few hundred KiB written: read whole, it was most of
    the forge tests' own CPU."""
    chunks = []
    with path.open("rb") as handle:
        end, offset = os.fstat(handle.fileno()).st_size, 0
        while offset < end:
            try:
                start = os.lseek(handle.fileno(), offset, os.SEEK_DATA)
            except OSError as error:
                if error.errno == errno.ENXIO:  # nothing but a hole from here on
                    break
                raise
            stop = os.lseek(handle.fileno(), start, os.SEEK_HOLE)
            handle.seek(start)
            chunks.append(handle.read(stop - start))
            chunks.append(b"\0")  # a needle cannot run across a hole
            offset = stop
    return b"".join(chunks)


T = TypeVar("T")
WORK = [[("shell", {"command": "sed -i 's/return a - b/return a + b/' calc.py && echo '- a round' >> CHANGES.md "
                               "&& python3 test_calc.py"})],
        [("finish", {"summary": "add() adds; CHANGES.md says so", "assumptions": []})]]


ASKING = [[("ask_user", {"question": "Should add() take floats too? @everyone"})], *WORK]


def serve(forged: Forged, tmp_path: Path, turns: list[Any], *, github: str = "",
          env: dict[str, str] | None = None) -> Served:
    model = script(tmp_path / "work.json", turns)
    (forged.home / "forge.toml").write_text(f'[github]\nbase_url = "{forged.fake.api_url}"\n{github}\n'
                                            f'[github.repos."{REPO}"]\npath = "{forged.project}"\n'
                                            f'model = "{model}"\n')
    return start_server(tmp_path, env={**forged.env, "ERRAND_PUBLIC_URL": "http://errand.test", **(env or {})})


@pytest.fixture
def served(forged: Forged, tmp_path: Path) -> Iterator[Served]:
    server = serve(forged, tmp_path, WORK)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def served_asking(forged: Forged, tmp_path: Path) -> Iterator[Served]:
    server = serve(forged, tmp_path, ASKING)
    try:
        yield server
    finally:
        server.stop()


def eventually(what: str, probe: Callable[[], T | None], seconds: float = 120) -> T:
    return until(probe, what, seconds)


def state(served: Served, task_id: str) -> str:
    return str(httpx.get(f"{served.url}/api/tasks/{task_id}", timeout=30).json()["state"])




GITEA_TOKEN = "gta_fakeGiteaTokenThatMustNeverLeak0123"
GITEA_SECRET = "gitea-webhook-secret-for-tests"


@dataclass
class OnForge:
    """A loopback Gitea or GitLab with one repository, and an errand home whose forge.toml lists it."""

    fake: Any
    project: Path
    home: Path
    env: dict[str, str]
    token: str
    repo: str


def _on_forge(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake: Any, kind: str, repo: str,
              env: dict[str, str], token: str) -> OnForge:
    project = make_repo(tmp_path / "calc")
    fake.add_repo(repo, project)
    home = tmp_path / "home"
    home.mkdir()
    (home / "forge.toml").write_text(f'[{kind}]\nbase_url = "{fake.api_url}"\n\n'
                                     f'[{kind}.repos."{repo}"]\npath = "{project}"\n')
    on = OnForge(fake, project, home, {"ERRAND_HOME": str(home), "ERRAND_FORGE_SYNC": "0.2", **env}, token, repo)
    for key, value in on.env.items():
        monkeypatch.setenv(key, value)
    for key in ("ERRAND_DATABASE_URL", "GITHUB_TOKEN", "ERRAND_WEBHOOK_SECRET"):
        monkeypatch.delenv(key, raising=False)
    return on


@pytest.fixture
def gitea(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[OnForge]:
    from .fakegitea import FakeGitea

    fake = FakeGitea(tmp_path / "gitea", token=GITEA_TOKEN, webhook_secret=GITEA_SECRET).start()
    on = _on_forge(tmp_path, monkeypatch, fake, "gitea", REPO, {
        "GITEA_TOKEN": GITEA_TOKEN, "ERRAND_GITEA_WEBHOOK_SECRET": GITEA_SECRET}, GITEA_TOKEN)
    try:
        yield on
    finally:
        stop_worker(on.home)
        fake.stop()


GITLAB_TOKEN = "glpat-fakeGitLabTokenThatMustNeverLeak01"
GITLAB_SECRET = "gitlab-webhook-secret-for-tests"
GITLAB_REPO = "acme/tools/calc"  # a subgroup: GitLab's paths nest


@pytest.fixture
def gitlab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[OnForge]:
    from .fakegitlab import FakeGitLab

    fake = FakeGitLab(tmp_path / "gitlab", token=GITLAB_TOKEN, webhook_secret=GITLAB_SECRET).start()
    on = _on_forge(tmp_path, monkeypatch, fake, "gitlab", GITLAB_REPO, {
        "GITLAB_TOKEN": GITLAB_TOKEN, "ERRAND_GITLAB_WEBHOOK_SECRET": GITLAB_SECRET}, GITLAB_TOKEN)
    try:
        yield on
    finally:
        stop_worker(on.home)
        fake.stop()
