"""Unified diffs as a grader reads them: split per file, the paths each part touches, and
which of those are tests or can change how the tests are run and reported."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePosixPath

from errand.tasks.evidence import is_test_file

__all__ = ["FilePatch", "edited_tests", "files_of", "runner_files", "split_patch", "without_paths"]

_HEADER = re.compile(r"^diff --git (?:\"?a/)(.+?)\"? (?:\"?b/)(.+?)\"?$")
_PATH_LINES = (("--- a/", 6), ("+++ b/", 6), ("rename from ", 12), ("rename to ", 10),
               ("copy from ", 10), ("copy to ", 8))
# Files that decide what the test runner loads or reports, wherever they are: a patch
# touching one could rewrite the outcomes (a conftest.py that marks every test passed).
_RUNNER_NAMES = frozenset({"conftest.py", "pytest.ini", ".pytest.ini", "tox.ini", "setup.cfg", "noxfile.py",
                           "sitecustomize.py", "usercustomize.py"})


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
    kept, dropped = [], []
    for part in split_patch(patch):
        if part.paths & paths:
            dropped += sorted(part.paths & paths)
        else:
            kept.append(part.text)
    return "".join(kept), dropped


def edited_tests(patch: str) -> list[str]:
    return sorted(path for path in files_of(patch) if is_test_file(path))


def runner_files(patch: str) -> list[str]:
    return sorted(path for path in files_of(patch) if PurePosixPath(path).name in _RUNNER_NAMES
                  or path.endswith(".pth"))
