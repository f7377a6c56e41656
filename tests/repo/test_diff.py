from __future__ import annotations

from pathlib import Path

from repohelpers import BINARY

from errand.repo.diff import diff_tree
from errand.repo.workcopy import WorkingCopy


def _edit(wc: Path) -> None:
    (wc / "src/app.py").write_text("def add(a, b):\n    return a + b\n")  # modified
    (wc / "src/new_module.py").write_text("X = 1\nY = 2\n")  # added, untracked
    (wc / "old.txt").unlink()  # deleted
    (wc / "logo.bin").write_bytes(BINARY[::-1] + b"\0\0")  # binary modified
    (wc / "data.bin").write_bytes(b"\0\x01\x02 new binary")  # binary added
    (wc / "cache.pyc").write_bytes(b"ignored")  # .gitignore'd


def test_diff_captures_modified_added_deleted_binary(user_repo: Path, tmp_path: Path) -> None:
    wc = WorkingCopy.prepare(user_repo, dest=tmp_path / "wc")
    assert wc.diff().empty
    _edit(wc.path)
    diff = wc.diff()
    by_path = {f.path: f for f in diff.files}
    assert set(by_path) == {"src/app.py", "src/new_module.py", "old.txt", "logo.bin", "data.bin"}
    assert by_path["src/app.py"].status == "modified"
    assert (by_path["src/app.py"].additions, by_path["src/app.py"].deletions) == (1, 1)
    assert by_path["src/new_module.py"].status == "added"
    assert by_path["src/new_module.py"].additions == 2
    assert by_path["old.txt"].status == "deleted"
    assert by_path["logo.bin"].binary and by_path["logo.bin"].status == "modified"
    assert by_path["data.bin"].binary and by_path["data.bin"].status == "added"
    assert "GIT binary patch" in diff.text
    assert "+    return a + b" in diff.text
    assert diff.stats.files == 5
    assert diff.stats.additions == 3 and diff.stats.deletions == 2
    # Without the seed index (every file hashed) the result is the same.
    unseeded = diff_tree(wc.path, wc.base_commit, objects_from=wc.host_git)
    assert unseeded.text == diff.text and unseeded.files == diff.files


def test_diff_detects_rename(user_repo: Path, tmp_path: Path) -> None:
    wc = WorkingCopy.prepare(user_repo, dest=tmp_path / "wc")
    (wc.path / "src/app.py").rename(wc.path / "src/calc.py")
    diff = wc.diff()
    assert [(f.status, f.old_path, f.path) for f in diff.files] == [("renamed", "src/app.py", "src/calc.py")]


def test_diff_ignores_agents_git_state(user_repo: Path, tmp_path: Path) -> None:
    """Commits, resets and a forged index in the working copy's .git change nothing: only files count."""
    wc = WorkingCopy.prepare(user_repo, dest=tmp_path / "wc")
    (wc.path / "README.md").write_text("agent edit\n")
    (wc.path / ".git/index").write_bytes(b"garbage")
    (wc.path / ".git/HEAD").write_text("ref: refs/heads/nowhere\n")
    diff = wc.diff()
    assert [(f.path, f.status) for f in diff.files] == [("README.md", "modified")]
    assert not any(".git/" in f.path for f in diff.files)


def test_diff_sees_same_size_edit_with_forged_mtime(user_repo: Path, tmp_path: Path) -> None:
    import os

    wc = WorkingCopy.prepare(user_repo, dest=tmp_path / "wc")
    target = wc.path / "README.md"
    st = target.stat()
    original = target.read_bytes()
    target.write_bytes(original.upper()[: len(original)])
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))  # same size, same mtime: ctime still differs
    assert [f.path for f in wc.diff().files] == ["README.md"]


def test_symlinks_are_recorded_not_followed(user_repo: Path, tmp_path: Path) -> None:
    secret = tmp_path / "host-secret.txt"
    secret.write_text("host secret\n")
    wc = WorkingCopy.prepare(user_repo, dest=tmp_path / "wc")
    (wc.path / "leak").symlink_to(secret)
    (wc.path / "outside").symlink_to(tmp_path)
    diff = wc.diff()
    assert {f.path for f in diff.files} == {"leak", "outside"}
    assert "host secret" not in diff.text
    assert "new file mode 120000" in diff.text


def test_tool_caches_stay_out_of_the_diff(user_repo: Path, tmp_path: Path) -> None:
    wc = WorkingCopy.prepare(user_repo, "HEAD", dest=tmp_path / "wc")
    (wc.path / "src/__pycache__").mkdir()
    (wc.path / "src/__pycache__/app.cpython-311.pyc").write_bytes(b"\0cache")
    (wc.path / ".pytest_cache").mkdir()
    (wc.path / ".pytest_cache/README.md").write_text("cache\n")
    (wc.path / "src/app.py").write_text("def add(a, b):\n    return a + b\n")
    assert [f.path for f in wc.diff().files] == ["src/app.py"]
