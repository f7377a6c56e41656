"""Red team for issue 25 (FAILS on main): the grader reads a patch's paths differently from
`git apply`, so a runner file can be written that the grader never saw. Class: every path git
writes must be a path :func:`files_of` reports (and so :func:`runner_path` can keep at the base)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from errand.eval.patches import files_of, misread, runner_path, without, written

SMUGGLED_AFTER_A_HUNK = """diff --git a/src/x.py b/src/x.py
--- a/src/x.py
+++ b/src/x.py
@@ -1,2 +1,2 @@
 a
-b
+c
--- /dev/null
+++ b/tests/conftest.py
@@ -0,0 +1 @@
+EVIL = 1
"""
C_QUOTED = """diff --git "a/conftest\\056py" "b/conftest\\056py"
new file mode 100644
--- /dev/null
+++ "b/conftest\\056py"
@@ -0,0 +1 @@
+EVIL = 2
"""


def _written_by_git(tmp_path: Path, patch: str) -> set[str]:
    run = {"cwd": tmp_path, "check": True, "capture_output": True, "text": True}
    subprocess.run(["git", "init", "-q"], **run)  # type: ignore[call-overload]
    (tmp_path / "src").mkdir()
    (tmp_path / "src/x.py").write_text("a\nb\n")
    subprocess.run(["git", "add", "-A"], **run)  # type: ignore[call-overload]
    subprocess.run(["git", "-c", "user.name=a", "-c", "user.email=a@x", "commit", "-qm", "base"], **run)  # type: ignore[call-overload]
    subprocess.run(["git", "apply", "--whitespace=nowarn", "-"], input=patch, **run)  # type: ignore[call-overload]
    status = subprocess.run(["git", "status", "--porcelain", "-uall"], **run).stdout  # type: ignore[call-overload]
    return {line[3:] for line in status.splitlines()}


@pytest.mark.faults
@pytest.mark.parametrize("patch", [SMUGGLED_AFTER_A_HUNK, C_QUOTED], ids=["after a hunk", "C-quoted path"])
def test_every_path_git_writes_is_one_the_grader_sees(tmp_path: Path, patch: str) -> None:
    written = _written_by_git(tmp_path, patch)
    assert any(path.endswith("conftest.py") for path in written), written  # git did write it
    assert written <= files_of(patch), (written, files_of(patch))
    kept, _dropped = without(patch, runner_path)
    assert "EVIL" not in kept


@pytest.mark.faults
@pytest.mark.parametrize("patch", [SMUGGLED_AFTER_A_HUNK, "garbage\n"], ids=["after a hunk", "not a patch"])
def test_a_patch_git_reads_otherwise_is_named_misread(patch: str) -> None:
    assert misread(patch) is not None


def test_a_patch_git_made_reads_the_same_to_both(tmp_path: Path) -> None:
    """Quoted names (non-ASCII, spaces), a rename, a deletion, a mode change and a binary file:
    what git writes is what errand reads, so an ordinary patch is graded."""
    run = {"cwd": tmp_path, "check": True, "capture_output": True}
    subprocess.run(["git", "init", "-q"], **run)  # type: ignore[call-overload]
    (tmp_path / "tests").mkdir()
    for name, data in {"x.py": b"a\n", "tests/conftest.py": b"t\n", "bin.dat": b"\0\1", "run.sh": b"m\n"}.items():
        (tmp_path / name).write_bytes(data)
    subprocess.run(["git", "add", "-A"], **run)  # type: ignore[call-overload]
    subprocess.run(["git", "-c", "user.name=a", "-c", "user.email=a@x", "commit", "-qm", "base"], **run)  # type: ignore[call-overload]
    subprocess.run(["git", "mv", "x.py", "café y.py"], **run)  # type: ignore[call-overload]
    subprocess.run(["git", "rm", "-q", "tests/conftest.py"], **run)  # type: ignore[call-overload]
    (tmp_path / "bin.dat").write_bytes(b"\0\2")
    (tmp_path / "run.sh").chmod(0o755)
    (tmp_path / "new file.txt").write_text("n\n")
    subprocess.run(["git", "add", "-A"], **run)  # type: ignore[call-overload]
    patch = subprocess.run(["git", "diff", "--cached", "--binary", "-M", "HEAD"], **run).stdout.decode()  # type: ignore[call-overload]
    assert '"b/caf\\303\\251 y.py"' in patch  # git quoted it
    assert misread(patch) is None
    assert files_of(patch) == {"x.py", "café y.py", "tests/conftest.py", "bin.dat", "run.sh", "new file.txt"}
    assert written(patch) == files_of(patch)
