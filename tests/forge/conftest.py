"""A loopback GitHub with one repository (a real project, its remote served over git's smart
HTTP), an errand home whose forge.toml points at it, and the token in the environment."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from engine.cli import stop_worker
from engine.harness import make_repo
from server.conftest import artifacts, browser  # noqa: F401 - fixtures of the batch page's browser check

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
                data = path.read_bytes()
            except OSError:
                continue
            if any(needle in data for needle in needles):
                found.append(str(path))
    return found


