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

Which paths a part writes is asked of git, the program that applies it (:func:`written`),
as well as read here: a plain diff after a hunk or a C-quoted name (``"b/conftest\\056py"``)
is a path git writes, so it is one :func:`without` sees. Where the two readings differ, or
git refuses the patch, :func:`misread` says why and the grader does not grade it.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import PurePosixPath

from errand.tasks.evidence import is_test_file

__all__ = ["FilePatch", "command_paths", "edited_tests", "files_of", "misread", "runner_path", "split_patch",
           "without", "without_paths", "written"]

_QUOTED = r'"(?:[^"\\]|\\.)*"'
_HEADER = re.compile(rf"^diff --git ({_QUOTED}|a/.+?) ({_QUOTED}|b/.+)$")
_PATH_LINES = (("--- ", "a/"), ("+++ ", "b/"), ("rename from ", ""), ("rename to ", ""),
               ("copy from ", ""), ("copy to ", ""))
_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}
_C_ESCAPE = re.compile(r"\\([0-7]{3}|.)")
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
    """One ``diff --git`` part: ``paths`` are what errand reads in it and what git writes
    applying it (``read`` and ``by_git``: ``None`` if git refuses the part)."""

    paths: frozenset[str]
    text: str
    read: frozenset[str] = frozenset()
    by_git: frozenset[str] | None = None


def split_patch(patch: str) -> list[FilePatch]:
    """The per-file parts of ``patch`` (text before the first ``diff --git`` is dropped)."""
    parts: list[list[str]] = []
    for line in patch.splitlines(keepends=True):
        if line.startswith("diff --git "):
            parts.append([line])
        elif parts:
            parts[-1].append(line)
    found = []
    for lines in parts:
        text, read = "".join(lines), frozenset(_paths(lines))
        by_git = written(text)
        found.append(FilePatch(read | (by_git or frozenset()), text, read, by_git))
    return found


@lru_cache(maxsize=256)  # a grade asks of the same parts several times
def written(patch: str) -> frozenset[str] | None:
    """The paths ``git apply`` writes applying ``patch`` (both of a rename or copy), as git itself
    reads them with the options the working copy applies with; ``None`` if git refuses it.
    ``--numstat`` names a rename's new path, and its old one once reversed (``-R``)."""
    if not patch.strip():
        return frozenset()
    found: set[str] = set()
    with tempfile.TemporaryDirectory(prefix="errand-paths-") as empty:
        for reverse in ([], ["-R"]):
            proc = subprocess.run(
                ["git", "apply", "--numstat", "-z", "--whitespace=nowarn", *reverse, "-"], cwd=empty,
                input=patch.encode("utf-8", "surrogateescape"), capture_output=True, check=False,
                env={**{k: v for k, v in os.environ.items() if not k.startswith("GIT_")}, "LC_ALL": "C",
                     "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CEILING_DIRECTORIES": empty})
            if proc.returncode != 0:
                return None
            fields = proc.stdout.decode("utf-8", "surrogateescape").split("\0")
            found.update(field.rsplit("\t", 1)[-1] for field in fields if field)
    return frozenset(found)


def misread(patch: str) -> str | None:
    """Why the paths git writes applying ``patch`` are not the ones errand reads in it, or
    ``None`` if they are (see the module docstring)."""
    if not patch.strip():
        return None
    whole = written(patch)
    if whole is None:
        return "git does not read the patch"
    parts = split_patch(patch)
    for part in parts:
        if part.by_git is None:
            return f"git does not read the part for {', '.join(sorted(part.read)) or 'no path'}"
        if part.by_git != part.read:
            return (f"git writes {', '.join(sorted(part.by_git))} where errand reads "
                    f"{', '.join(sorted(part.read))}")
    unseen = whole - {path for part in parts for path in part.paths}
    return f"git writes {', '.join(sorted(unseen))} outside any part errand reads" if unseen else None


def _paths(lines: list[str]) -> set[str]:
    found: set[str] = set()
    header = _HEADER.match(lines[0].rstrip("\n"))
    if header:
        found.update(_name(token)[2:] for token in header.groups())
    for line in lines[1:]:
        if line.startswith("@@"):
            break
        for prefix, side in _PATH_LINES:
            if line.startswith(prefix):
                name = _name(line[len(prefix):].rstrip("\n").split("\t", 1)[0])
                if name != "/dev/null":
                    found.add(name.removeprefix(side))
    return found


def _name(token: str) -> str:
    """A path as git writes it in a header: C-quoted (``"b/conftest\\056py"``) or as it is."""
    if len(token) < 2 or not (token.startswith('"') and token.endswith('"')):
        return token
    raw = bytearray()
    at = 0
    inner = token[1:-1]
    for escape in _C_ESCAPE.finditer(inner):
        raw += inner[at:escape.start()].encode("utf-8", "surrogateescape")
        code = escape.group(1)
        raw.append(int(code, 8) & 0xFF if len(code) == 3 else _ESCAPES.get(code, ord(code[0]) & 0xFF))
        at = escape.end()
    raw += inner[at:].encode("utf-8", "surrogateescape")
    return raw.decode("utf-8", "surrogateescape")


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
