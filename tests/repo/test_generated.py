"""What setup wrote into a working copy becomes a layer under later copies, out of their diffs;
what it changed in tracked files, deleted, or wrote under .git does not."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from repohelpers import git

from errand.repo import WorkingCopy
from errand.repo.generated import Harvest, harvest


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ERRAND_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def _harvested(setup: WorkingCopy, layer: Path) -> Harvest:
    """What harvest kept of ``setup`` in the new directory ``layer``; ``setup`` is removed, whatever happens."""
    layer.mkdir()
    try:
        return harvest(setup, layer)
    finally:
        setup.remove()


def test_setup_files_reach_later_copies_and_stay_out_of_their_diffs(
        user_repo: Path, tmp_path: Path, home: Path) -> None:
    (user_repo / ".gitignore").write_text(".venv/\n*.egg-info/\n")
    git(user_repo, "commit", "-q", "-m", "ignore the venv", "--", ".gitignore")
    setup = WorkingCopy.overlaid(user_repo, "main", dest=tmp_path / "setup")
    (setup.path / ".venv/bin").mkdir(parents=True)
    (setup.path / ".venv/bin/python").write_text("venv")
    (setup.path / "src/_version.py").write_text("version = '1.0'\n")  # not ignored
    (setup.path / "tool/__pycache__").mkdir(parents=True)  # a new directory git does not ignore...
    (setup.path / "tool/__pycache__/x.pyc").write_text("")  # ...holding one errand's excludes ignore
    (setup.path / "tool/run.py").write_text("")
    (setup.path / "src/app.py").write_text("rewritten by setup\n")  # tracked: left out
    os.remove(setup.path / "README.md")  # a deletion: left out
    (setup.path / ".git/hooks").mkdir(exist_ok=True)
    (setup.path / ".git/hooks/pre-commit").write_text("#!/bin/sh\n")  # under .git: left out
    layer = tmp_path / "layer"
    kept = _harvested(setup, layer)
    assert kept.untracked == ["src/_version.py", "tool/"]
    assert ".venv/" in kept.ignored
    assert sorted(kept.changed_tracked) == ["README.md", "src/app.py"]
    assert not (layer / ".git").exists() and not (layer / "README.md").exists()

    copy = WorkingCopy.overlaid(user_repo, "main", dest=tmp_path / "copy", layers=[layer],
                                diff_excludes=kept.untracked)
    try:
        assert (copy.path / ".venv/bin/python").read_text() == "venv"
        assert (copy.path / "src/_version.py").is_file() and (copy.path / "tool/__pycache__/x.pyc").is_file()
        assert "rewritten" not in (copy.path / "src/app.py").read_text() and (copy.path / "README.md").is_file()
        assert copy.diff().empty
        (copy.path / "src/app.py").write_text("def add(a, b):\n    return a + b\n")
        assert [change.path for change in copy.diff().files] == ["src/app.py"]
    finally:
        copy.remove()


def test_a_symlink_on_the_way_is_never_followed(user_repo: Path, tmp_path: Path, home: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    setup = WorkingCopy.overlaid(user_repo, "main", dest=tmp_path / "setup")
    (setup.path / "build").symlink_to(outside)
    (outside / "secret").write_text("host")
    layer = tmp_path / "layer"
    kept = _harvested(setup, layer)
    assert (layer / "build").is_symlink() and os.readlink(layer / "build") == str(outside)
    assert (outside / "secret").read_text() == "host" and kept.untracked == ["build"]
    shutil.rmtree(layer)
