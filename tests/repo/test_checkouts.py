"""Pruning pristine checkouts: unused ones go, used or mounted ones stay, crashed leftovers go."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from errand.cli import app
from errand.repo import WorkingCopy, checkouts

DAY = 86_400.0


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ERRAND_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def _entry(commit: str) -> Path:
    def build(partial: Path, final: Path) -> None:
        (partial / "host.git").mkdir()
        (partial / "tree").mkdir()
        (partial / "tree" / "file.txt").write_text(commit)

    return checkouts.pristine("/src/repo", commit, None, build)


def _age(entry: Path, days: float) -> None:
    then = time.time() - days * DAY
    os.utime(entry / "ready", (then, then))


def test_unused_checkouts_go_and_recent_ones_stay(home: Path) -> None:
    old, recent = _entry("a" * 40), _entry("b" * 40)
    _age(old, 30)
    _age(recent, 2)
    assert checkouts.prune(14 * DAY) == [old.name]
    assert not old.exists() and (recent / "tree" / "file.txt").read_text() == "b" * 40


def test_using_a_checkout_again_keeps_it(home: Path) -> None:
    entry = _entry("c" * 40)
    _age(entry, 30)
    built = []
    again = checkouts.pristine("/src/repo", "c" * 40, None, lambda partial, final: built.append(partial))
    assert again == entry and built == []  # the cached entry, not a rebuild
    assert checkouts.prune(14 * DAY) == [] and entry.is_dir()


def test_a_checkout_being_built_or_used_right_now_stays(home: Path) -> None:
    entry = _entry("d" * 40)
    _age(entry, 30)
    with open(entry.parent / f"{entry.name}.lock") as lock:
        fcntl.flock(lock, fcntl.LOCK_SH)  # as pristine() holds it while it hands the entry out
        assert checkouts.prune(0) == []
    assert checkouts.prune(0) == [entry.name]


def test_a_mounted_working_copy_keeps_its_checkout(home: Path, user_repo: Path, tmp_path: Path) -> None:
    copy = WorkingCopy.overlaid(user_repo, "main", dest=tmp_path / "wc")
    try:
        entry = copy.host_git.parent
        _age(entry, 30)
        assert checkouts.prune(14 * DAY) == []
        assert (copy.path / "README.md").read_text() == "# demo\nsecond commit\n"
    finally:
        copy.remove()
    assert checkouts.prune(14 * DAY) == [entry.name]
    again = WorkingCopy.overlaid(user_repo, "main", dest=tmp_path / "wc2")  # checks out anew
    try:
        assert (again.path / "README.md").read_text() == "# demo\nsecond commit\n"
    finally:
        again.remove()


def test_leftovers_of_a_killed_build_and_of_a_crashed_removal_go(home: Path) -> None:
    root = home / "checkouts"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()
    leftovers = [root / f".{'e' * 32}.{dead}", root / f".trash-{'f' * 32}-{dead}"]
    building = root / f".{'g' * 32}.{os.getpid()}"  # this process is alive: still being built
    for path in (*leftovers, building):
        (path / "tree").mkdir(parents=True)
    assert sorted(checkouts.prune()) == sorted(path.name for path in leftovers)
    assert building.is_dir() and not any(path.exists() for path in leftovers)


def test_errand_gc_prunes_checkouts(home: Path) -> None:
    entry = _entry("h" * 40)
    _age(entry, 3)
    kept = CliRunner().invoke(app, ["gc", "--unused-days", "7"])
    assert kept.exit_code == 0 and entry.is_dir()
    removed = CliRunner().invoke(app, ["gc", "--unused-days", "2"])
    assert removed.exit_code == 0, removed.output
    assert f"removed checkout {entry.name}" in removed.output and not entry.exists()
    refused = CliRunner().invoke(app, ["gc", "--unused-days", "-1"])
    assert refused.exit_code == 2
