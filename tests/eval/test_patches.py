"""Patches: the parts that touch the test patch dropped, and the paths that decide how tests run."""

from __future__ import annotations

import pytest

from errand.eval.patches import command_paths, edited_tests, runner_path, without, without_paths

PATCH = """\
diff --git a/src/core.py b/src/core.py
--- a/src/core.py
+++ b/src/core.py
@@ -1 +1 @@
-a
+b
diff --git a/tests/test_core.py b/tests/test_core.py
--- a/tests/test_core.py
+++ b/tests/test_core.py
@@ -1 +1 @@
-assert f() == 1
+assert True
diff --git a/tests/conftest.py b/tests/conftest.py
new file mode 100644
--- /dev/null
+++ b/tests/conftest.py
@@ -0,0 +1 @@
+import pytest
"""


def test_patch_parts_touching_the_test_patch_are_dropped() -> None:
    kept, dropped = without_paths(PATCH, {"tests/test_core.py"})
    assert dropped == ["tests/test_core.py"]
    assert "src/core.py" in kept and "tests/test_core.py" not in kept and "tests/conftest.py" in kept
    assert edited_tests(PATCH) == ["tests/conftest.py", "tests/test_core.py"]
    assert without(PATCH, runner_path)[1] == ["tests/conftest.py"]


@pytest.mark.parametrize(("path", "decides"), [
    ("pyproject.toml", True), ("sub/pytest.toml", True), (".pytest.toml", True), ("pytest.ini", True),
    ("tox.ini", True), ("setup.cfg", True), ("tests/unit/conftest.py", True), ("src/sitecustomize.py", True),
    ("usercustomize.py", True), ("anything.pth", True), ("x-1.0.dist-info/entry_points.txt", True),
    ("src/x.egg-info/entry_points.txt", True), ("__editable___x_finder.py", True), ("pytest/__main__.py", True),
    ("pytest/__init__.py", True), ("_pytest/__init__.py", True), ("pluggy.py", True), ("json.py", True),
    ("xml/__init__.py", True), ("../outside.py", True), ("src/pkg/__pycache__/core.cpython-311.pyc", True),
    ("src/pkg/core.pyc", True),
    ("src/pkg/core.py", False), ("tests/test_json.py", False), ("docs/types.txt", False), ("README.md", False),
    ("src/pkg/json.py", False), ("test/__init__.py", False),
])
def test_which_paths_decide_how_tests_run(path: str, decides: bool) -> None:
    assert runner_path(path) is decides


def test_the_files_a_test_command_names() -> None:
    assert command_paths(".venv/bin/python -m pytest -p no:cacheprovider -q {junit} {tests}") == {".venv/bin/python"}
    assert command_paths("PYTHONPATH=src python ./runtests.py --parallel=1") == {"runtests.py"}
    assert {"Makefile", "makefile", "GNUmakefile"} <= command_paths("make test")
