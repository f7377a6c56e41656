"""Red team for issue 25 (FAILS on main): the grader reads a patch's paths differently from
`git apply`, so a runner file can be written that the grader never saw. Class: every path git
writes must be a path :func:`files_of` reports (and so :func:`runner_path` can keep at the base)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from errand.eval.patches import files_of, runner_path, without

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
