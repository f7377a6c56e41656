"""`errand gc` removes the stripped copies of repositories no evaluation has used for a while
(and what a strip that died left), and keeps the ones in use."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from errand.cli import app
from errand.eval.strip import stripped_source

DAY = 86_400


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def test_gc_removes_stripped_sources_unused_for_days(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ERRAND_CACHE_DIR", str(tmp_path / "cache"))
    repo = tmp_path / "project"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    shas = []
    for n in range(2):
        (repo / "notes.txt").write_text(f"{n}\n")
        git(repo, "add", "-A")
        git(repo, "-c", "user.email=dev@example.com", "-c", "user.name=Dev", "commit", "-q", "-m", f"note {n}")
        shas.append(git(repo, "rev-parse", "HEAD"))
    old, fresh = stripped_source(str(repo), shas[0]), stripped_source(str(repo), shas[1])
    month_ago = time.time() - 30 * DAY
    os.utime(old / "errand-stripped", (month_ago, month_ago))
    os.utime(fresh / "errand-stripped", (month_ago, month_ago))
    assert stripped_source(str(repo), shas[1]) == fresh  # used again today
    dead = old.with_name(f"{old.name}.4194000.0123abcd.partial")  # a strip whose process is gone
    dead.mkdir()

    result = CliRunner().invoke(app, ["gc", "--unused-days", "7"])
    assert result.exit_code == 0, result.output
    assert f"removed eval source {old.name}" in result.output
    assert f"removed eval source {dead.name}" in result.output
    assert not old.exists() and not dead.exists() and fresh.is_dir()
    assert (stripped_source(str(repo), shas[0]) / "errand-stripped").is_file()  # made again when needed
