"""Unified diffs as a grader reads them: split per file, the paths each part touches, and
which of those are tests or decide how the tests are run and reported.

The test runner's configuration is the base commit's wherever it lives, so a
candidate's part that touches any of these is not applied (:func:`runner_path`):

* a file pytest or Python reads as configuration or code before any test runs:
  ``pyproject.toml`` (its tool tables: ``addopts = "-p plugin"``), ``pytest.toml``
  (pytest 9 reads it first), ``pytest.ini``, ``tox.ini``, ``setup.cfg``, every
  ``conftest.py``, ``sitecustomize``/``usercustomize``, ``*.pth``, package metadata
  (``*.dist-info``, ``*.egg-info``: entry points load plugins), editable-install hooks
  (``__editable__*``), compiled bytecode (an unchecked-hash ``.pyc`` runs in place of
  the source beside it, which the diff shows);
* a module at the tree's top that would shadow the runner or the standard library
  (``python -m pytest`` puts the working directory first on ``sys.path``: a
  ``pytest/__main__.py`` there *is* the runner);
* anything the environment's setup wrote into the tree (the virtualenv and what it
  holds: pytest itself), and any file the test command names (a ``runtests.py``).
"""

from __future__ import annotations

import re
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePosixPath

from errand.tasks.evidence import is_test_file

__all__ = ["FilePatch", "command_paths", "edited_tests", "files_of", "runner_path", "split_patch", "without",
           "without_paths"]

_HEADER = re.compile(r"^diff --git (?:\"?a/)(.+?)\"? (?:\"?b/)(.+?)\"?$")
_PATH_LINES = (("--- a/", 6), ("+++ b/", 6), ("rename from ", 12), ("rename to ", 10),
               ("copy from ", 10), ("copy to ", 8))
# Files that decide what the test runner loads or reports, wherever they are: a patch
# touching one could rewrite the outcomes (a conftest.py that marks every test passed).
_RUNNER_NAMES = frozenset({"conftest.py", "pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml",
                           "pyproject.toml", "tox.ini", "setup.cfg", "noxfile.py", "sitecustomize.py",
                           "usercustomize.py"})
_RUNNER_SUFFIXES = (".pth", ".egg-link", ".pyc", ".pyo")
_METADATA_DIRS = (".dist-info", ".egg-info")
# The runner's own modules; with the standard library's, what a top-level module must not shadow.
_RUNNER_MODULES = frozenset({"pytest", "_pytest", "py", "pluggy", "iniconfig", "packaging", "exceptiongroup",
                             "tomli", "colorama", "pygments", "xdist", "conftest", "sitecustomize",
                             "usercustomize"})
_SHADOWED = _RUNNER_MODULES | frozenset(sys.stdlib_module_names)
_MODULE_SUFFIXES = (".py", ".pyc", ".pyw", ".so", ".pyd")
_MAKE = ("Makefile", "makefile", "GNUmakefile")


@dataclass(frozen=True)
class FilePatch:
    paths: frozenset[str]
    text: str


def split_patch(patch: str) -> list[FilePatch]:
    """The per-file parts of ``patch`` (text before the first ``diff --git`` is dropped)."""
    parts: list[list[str]] = []
    for line in patch.splitlines(keepends=True):
        if line.startswith("diff --git "):
            parts.append([line])
        elif parts:
            parts[-1].append(line)
    return [FilePatch(frozenset(_paths(lines)), "".join(lines)) for lines in parts]


def _paths(lines: list[str]) -> set[str]:
    found: set[str] = set()
    header = _HEADER.match(lines[0].rstrip("\n"))
    if header:
        found.update(header.groups())
    for line in lines[1:]:
        if line.startswith("@@"):
            break
        for prefix, size in _PATH_LINES:
            if line.startswith(prefix):
                found.add(line[size:].rstrip("\n").strip('"').split("\t", 1)[0])
    return found


def files_of(patch: str) -> set[str]:
    return {path for part in split_patch(patch) for path in part.paths}


def without_paths(patch: str, paths: set[str]) -> tuple[str, list[str]]:
    """``patch`` without the parts that touch any of ``paths``, and the paths dropped."""
    return without(patch, paths.__contains__)


def without(patch: str, dropped_if: Callable[[str], bool]) -> tuple[str, list[str]]:
    """``patch`` without the parts that touch a path ``dropped_if`` holds, and those paths."""
    kept, dropped = [], []
    for part in split_patch(patch):
        matched = sorted(path for path in part.paths if dropped_if(path))
        if matched:
            dropped += matched
        else:
            kept.append(part.text)
    return "".join(kept), dropped


def edited_tests(patch: str) -> list[str]:
    return sorted(path for path in files_of(patch) if is_test_file(path))


def runner_path(path: str) -> bool:
    """Whether ``path`` decides how the tests are run or reported, by its name alone (see the
    module docstring; what setup wrote and what the command names are the caller's to add)."""
    pure = PurePosixPath(path)
    if ".." in pure.parts or pure.is_absolute():
        return True
    name = pure.name
    if name in _RUNNER_NAMES or name.endswith(_RUNNER_SUFFIXES) or name.startswith("__editable__"):
        return True
    if any(part.endswith(_METADATA_DIRS) or part == "__pycache__" for part in pure.parts[:-1]):
        return True  # metadata declares entry points; an unchecked-hash .pyc runs instead of its source
    return _shadows(pure)


def _shadows(pure: PurePosixPath) -> bool:
    """A module or package at the top that an import of the runner or the standard library finds
    first: ``X.py``, ``X.pyc``, ``X.cpython-311-x86_64-linux-gnu.so``, ``X/__init__.py``."""
    parts = pure.parts
    if not parts[-1].endswith(_MODULE_SUFFIXES):
        return False
    if len(parts) == 1:
        return parts[0].split(".", 1)[0] in _SHADOWED
    return len(parts) == 2 and parts[0] in _SHADOWED and parts[1].split(".", 1)[0] in ("__init__", "__main__")


def command_paths(command: str) -> set[str]:
    """The files of the tree that a test command names (``.venv/bin/python``, ``runtests.py``, a
    ``Makefile`` for ``make``): the candidate's versions of them are not what runs."""
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    found: set[str] = set()
    for word in words:
        if word.startswith("-") or "{" in word or "$" in word or "=" in word:
            continue
        path = word.removeprefix("./")
        if "/" in path or path.endswith((".py", ".sh", ".cfg", ".ini", ".toml")):
            found.add(path)
        if PurePosixPath(path).name in ("make", "gmake"):
            found.update(_MAKE)
    return found
