"""The source an instance's sandboxes are cloned from holds nothing later than its base commit:
``main`` at the base and the tags on its history, no other branch, tag or object; made once per
(source, base) and cached."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from errand.eval.errors import EvalError
from errand.eval.strip import stripped_source


def git(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.email=dev@example.com", "-c", "user.name=Dev", *args],
                          check=check, capture_output=True, text=True)


def commit(repo: Path, name: str, text: str) -> str:
    (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", f"write {name}")
    return git(repo, "rev-parse", "HEAD").stdout.strip()


@pytest.fixture
def history(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, dict[str, str]]:
    """A project whose fix came after the base: on main, tagged, and on a branch of its own."""
    monkeypatch.setenv("ERRAND_CACHE_DIR", str(tmp_path / "cache"))
    repo = tmp_path / "project"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    shas = {"first": commit(repo, "calc.py", "def add(a, b):\n    return a - b\n")}
    git(repo, "tag", "-a", "v1.0", "-m", "1.0")
    shas["base"] = commit(repo, "README.md", "# calc\n")
    git(repo, "switch", "-q", "-c", "fix-branch")
    shas["branch"] = commit(repo, "calc.py", "def add(a, b):\n    return b + a\n")
    git(repo, "switch", "-q", "main")
    shas["fix"] = commit(repo, "calc.py", "def add(a, b):\n    return a + b\n")
    git(repo, "tag", "v1.1")
    return repo, shas


def test_the_stripped_source_has_main_at_the_base_and_the_tags_on_its_history_only(
        history: tuple[Path, dict[str, str]]) -> None:
    repo, shas = history
    stripped = stripped_source(str(repo), shas["base"])
    refs = git(stripped, "for-each-ref", "--format=%(refname)").stdout.split()
    assert refs == ["refs/heads/main", "refs/tags/v1.0"]
    assert git(stripped, "rev-parse", "main").stdout.strip() == shas["base"]
    assert git(stripped, "symbolic-ref", "HEAD").stdout.strip() == "refs/heads/main"
    for later in (shas["fix"], shas["branch"]):  # not even as a loose or packed object
        assert git(stripped, "cat-file", "-e", later, check=False).returncode != 0
    assert git(stripped, "rev-list", "--all").stdout.split() == [shas["base"], shas["first"]]
    clone = repo.parent / "clone"
    subprocess.run(["git", "clone", "-q", str(stripped), str(clone)], check=True)
    assert (clone / "calc.py").read_text() == "def add(a, b):\n    return a - b\n"


def test_a_source_is_stripped_once_per_base_and_each_base_has_its_own(history: tuple[Path, dict[str, str]]) -> None:
    repo, shas = history
    stripped = stripped_source(str(repo), shas["base"])
    (stripped / "marker").write_text("kept")
    assert stripped_source(str(repo), shas["base"]) == stripped and (stripped / "marker").is_file()
    at_fix = stripped_source(str(repo), shas["fix"])
    assert at_fix != stripped and git(at_fix, "rev-parse", "main").stdout.strip() == shas["fix"]
    assert sorted(git(at_fix, "tag").stdout.split()) == ["v1.0", "v1.1"]


def test_a_commit_the_source_has_not_is_refused_and_leaves_nothing_behind(
        history: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    repo, _ = history
    with pytest.raises(EvalError) as caught:
        stripped_source(str(repo), "0" * 40)
    assert caught.value.code == "eval_no_commit" and "0" * 40 in caught.value.message
    with pytest.raises(EvalError) as caught:
        stripped_source(str(tmp_path / "no-such-repo"), "main")
    assert caught.value.code == "eval_no_commit"
    assert list((tmp_path / "cache" / "eval-sources").iterdir()) == []
