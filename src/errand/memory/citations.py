"""Files and symbols a memory cites, and whether they still exist in a working tree.

A memory that says "run ``scripts/check.sh``" or "``TaskStore.open`` migrates"
is only as good as the tree it describes. Citations are pulled out of the text
when a memory is stored; at retrieval, :func:`check` looks them up in the
current tree and names each one that no longer holds, so the agent is told the
memory is stale instead of trusting it.

Citations are strings: ``file:<relative path>`` or ``symbol:<identifier>``.
The tree is read as plain files (never through git, whose config a checkout can
plant), walking at most :data:`MAX_FILES` files of at most :data:`MAX_FILE_BYTES`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

__all__ = ["MAX_FILES", "MAX_FILE_BYTES", "TreeIndex", "check", "extract"]

MAX_FILES = 20_000
MAX_FILE_BYTES = 512 * 1024
_SKIP_DIRS = frozenset({".git", "node_modules", ".venv", "venv", "__pycache__", ".mypy_cache", ".ruff_cache",
                        ".pytest_cache", "target", "dist", "build", ".tox"})
_EXTENSIONS = (
    "py|pyi|js|mjs|cjs|ts|tsx|jsx|go|rs|java|kt|c|h|cc|cpp|hpp|rb|php|cs|swift|scala|toml|ya?ml|json|md|rst|txt"
    "|cfg|ini|sh|bash|mk|lock|sql|html|css|proto|gradle|xml"
)
# A path: optional directories, a name with a known extension; not part of a URL or a longer word.
_PATH = re.compile(rf"(?<![\w/.:@-])((?:\.?[\w-]+/)*[\w.-]*\w\.(?:{_EXTENSIONS}))(?![\w/])")
_BACKTICKED = re.compile(r"`([^`\n]{2,120})`")
_SYMBOL = re.compile(r"^[A-Za-z_][\w]*(?:(?:\.|::)[A-Za-z_]\w*)*(?:\(\))?$")
_KNOWN_FILES = frozenset({"Makefile", "Dockerfile", "Justfile", "Rakefile", "Gemfile", "Procfile"})


def extract(text: str) -> tuple[str, ...]:
    """The citations in ``text``, in order of first appearance, without repeats."""
    found: list[str] = []
    for match in _PATH.finditer(text):
        found.append(f"file:{match.group(1)}")
    for match in _BACKTICKED.finditer(text):
        inner = match.group(1).strip()
        if "/" in inner and " " not in inner and not re.match(r"^\w+://", inner):
            found.append(f"file:{inner.removeprefix('./')}")
        elif inner in _KNOWN_FILES:
            found.append(f"file:{inner}")
        elif _SYMBOL.match(inner) and _looks_like_code(inner):
            found.append(f"symbol:{inner.removesuffix('()')}")
    return tuple(dict.fromkeys(found))


def _looks_like_code(token: str) -> bool:
    # `pytest` or `ruff` are command names, not symbols; require code-shaped identifiers.
    return token.endswith("()") or "." in token or "::" in token or "_" in token.strip("_") \
        or re.search(r"[a-z][A-Z]", token) is not None


@dataclass
class TreeIndex:
    """A lazily built view of a working tree: which relative paths exist, which words occur in text files."""

    root: Path
    _paths: set[str] | None = None
    _names: set[str] = field(default_factory=set)
    _words: set[str] | None = None

    def has_file(self, relative: str) -> bool:
        pure = PurePosixPath(relative)
        if pure.is_absolute() or ".." in pure.parts:
            return False
        if "/" not in relative:
            return relative in self._file_names()
        return relative in self._all_paths() or (self.root / relative).is_file()

    def has_symbol(self, symbol: str) -> bool:
        # The last component is what a definition spells: `TaskStore.open` is defined as `def open`.
        last = re.split(r"\.|::", symbol)[-1]
        return last in self._all_words()

    def _all_paths(self) -> set[str]:
        if self._paths is None:
            self._paths = set(self._walk())
            self._names = {PurePosixPath(path).name for path in self._paths}
        return self._paths

    def _file_names(self) -> set[str]:
        self._all_paths()
        return self._names

    def _all_words(self) -> set[str]:
        if self._words is None:
            words: set[str] = set()
            for relative in sorted(self._all_paths()):
                words.update(_words_of(self.root / relative))
            self._words = words
        return self._words

    def _walk(self) -> Iterable[str]:
        count = 0
        for directory, subdirectories, files in os.walk(self.root):
            subdirectories[:] = sorted(name for name in subdirectories if name not in _SKIP_DIRS)
            base = Path(directory).relative_to(self.root)
            for name in sorted(files):
                count += 1
                if count > MAX_FILES:
                    return
                yield (base / name).as_posix()


def _words_of(path: Path) -> set[str]:
    try:
        if path.is_symlink() or path.stat().st_size > MAX_FILE_BYTES:
            return set()
        data = path.read_bytes()
    except OSError:
        return set()
    if b"\0" in data[:4096]:
        return set()
    return set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", data.decode("utf-8", errors="replace")))


def check(citations: Sequence[str], tree: TreeIndex) -> tuple[str, ...]:
    """Why the citations no longer hold in ``tree``: one reason each for a missing file or symbol."""
    reasons: list[str] = []
    for citation in citations:
        kind, _, value = citation.partition(":")
        if kind == "file" and not tree.has_file(value):
            reasons.append(f"cites {value}, which is not in the tree")
        elif kind == "symbol" and not tree.has_symbol(value):
            reasons.append(f"cites {value}, which no file in the tree mentions")
    return tuple(reasons)
