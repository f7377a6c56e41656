"""Reading a repository's file without following it out of the repository or waiting on it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from errand._files import read_inside


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "src").mkdir(parents=True)
    (root / "src" / "core.py").write_bytes(b"def f():\n    return 1\n")
    (tmp_path / "secret.txt").write_text("outside")
    return root


def test_a_file_is_read_whole_or_cut_at_the_limit(repo: Path) -> None:
    assert read_inside(repo, "src/core.py", None) == (b"def f():\n    return 1\n", False)
    assert read_inside(repo, "src/core.py", 8) == (b"def f():", True)
    assert read_inside(repo, "src/core.py", 22) == (b"def f():\n    return 1\n", False)  # exactly its size
    assert read_inside(repo, "src/core.py", 0) == (b"", True)


def test_a_symlink_inside_the_repository_is_followed(repo: Path) -> None:
    (repo / "link.py").symlink_to("src/core.py")
    assert read_inside(repo, "link.py", None) == (b"def f():\n    return 1\n", False)


@pytest.mark.parametrize("name", ["../secret.txt", "src/../../secret.txt", "/etc/hostname", "missing.py", "src",
                                  "escape.txt", "loop"])
def test_what_is_not_a_file_of_the_repository_is_none(repo: Path, name: str) -> None:
    (repo / "escape.txt").symlink_to(repo.parent / "secret.txt")
    (repo / "loop").symlink_to("loop")
    assert read_inside(repo, name, None) is None


def test_a_fifo_is_never_opened_for_long(repo: Path) -> None:
    os.mkfifo(repo / "pipe")  # no writer: a blocking open would wait for ever
    assert read_inside(repo, "pipe", 100) is None

