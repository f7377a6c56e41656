"""Files and symbols a memory cites, and whether they still exist in a working tree.

A memory that says "run ``scripts/check.sh``" or "``TaskStore.open`` migrates"
is only as good as the tree it describes. Citations are pulled out of the text
when a memory is stored; at retrieval, :func:`check` looks them up in the
current tree and names each one that no longer holds, so the agent is told the
memory is stale instead of trusting it.

Citations are strings: ``file:<relative path>``, ``line:<relative path>:<line>``
(from ``src/app.py:42``) or ``symbol:<identifier>``. A line citation holds
while the file has that line and, when the memory names symbols, one of them
is still written within a few lines of it: the line a memory points at is what
changes first. Symbols are looked for in code files only, so a CHANGELOG that
still mentions a removed function does not keep a memory about it "fresh".
The tree is read as plain files (never through git, whose config a checkout can
plant), walking at most :data:`MAX_FILES` files of at most :data:`MAX_FILE_BYTES`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

__all__ = ["LINE_SLACK", "MAX_FILES", "MAX_FILE_BYTES", "TreeIndex", "check", "extract"]

MAX_FILES = 20_000
MAX_FILE_BYTES = 512 * 1024
_SKIP_DIRS = frozenset({".git", "node_modules", ".venv", "venv", "__pycache__", ".mypy_cache", ".ruff_cache",
                        ".pytest_cache", "target", "dist", "build", ".tox"})
_EXTENSIONS = (
    "py|pyi|js|mjs|cjs|ts|tsx|jsx|go|rs|java|kt|c|h|cc|cpp|hpp|rb|php|cs|swift|scala|toml|ya?ml|json|md|rst|txt"
    "|cfg|ini|sh|bash|mk|lock|sql|html|css|proto|gradle|xml"
)
# Files whose words can define a symbol (documentation and data only mention them).
_CODE_SUFFIXES = frozenset((
    ".py", ".pyi", ".js", ".mjs", ".cjs", ".ts", ".tsx", ".jsx", ".go", ".rs", ".java", ".kt", ".c", ".h", ".cc",
    ".cpp", ".hpp", ".rb", ".php", ".cs", ".swift", ".scala", ".sh", ".bash", ".sql", ".proto", ".gradle", ".m",
    ".lua", ".ex", ".exs", ".erl", ".hs", ".ml", ".zig", ".dart", ".vue", ".svelte",
))
_CODE_NAMES = frozenset({"Makefile", "Justfile", "Rakefile", "Dockerfile"})
#: How many lines either side of a cited line a symbol the memory names may have moved.
LINE_SLACK = 3
# A path: optional directories, a name with a known extension, maybe `:line`; not part of a URL or a word.
_PATH = re.compile(rf"(?<![\w/.:@-])((?:\.?[\w-]+/)*[\w.-]*\w\.(?:{_EXTENSIONS}))(?::(\d+))?(?![\w/])")
# Node.js, Vue.js: a product's name, not a file, unless it is written as code or under a directory.
_PRODUCT_NAME = re.compile(r"[A-Z][a-z]+\.js")
_BACKTICKED = re.compile(r"`([^`\n]{2,120})`")
_SYMBOL = re.compile(r"^[A-Za-z_][\w]*(?:(?:\.|::)[A-Za-z_]\w*)*(?:\(\))?$")
_KNOWN_FILES = frozenset({"Makefile", "Dockerfile", "Justfile", "Rakefile", "Gemfile", "Procfile"})


def extract(text: str) -> tuple[str, ...]:
    """The citations in ``text``, in order of first appearance, without repeats."""
    found: list[str] = []
    backticked = {match.group(1).strip() for match in _BACKTICKED.finditer(text)}
    for match in _PATH.finditer(text):
        path, line = match.group(1), match.group(2)
        if _PRODUCT_NAME.fullmatch(path) and path not in backticked:
            continue
        found.append(f"file:{path}")
        if line is not None and int(line) > 0:
            found.append(f"line:{path}:{int(line)}")
    for match in _BACKTICKED.finditer(text):
        inner = match.group(1).strip()
        if re.fullmatch(r"[^\s:]+:\d+", inner):
            continue  # `path:line`, found above
        if "/" in inner and " " not in inner and not re.match(r"^\w+://", inner):
            found.append(f"file:{inner.removeprefix('./')}")
        elif inner in _KNOWN_FILES:
            found.append(f"file:{inner}")
        elif _PATH.fullmatch(inner):
            continue  # a file name (`settings.toml`), found above; not a symbol
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
        return _last_part(symbol) in self._all_words()

    def lines(self, relative: str) -> list[str] | None:
        """The text lines of a file inside the tree (None if it is missing, binary or too large)."""
        if not self.has_file(relative):
            return None
        text = _text_of(self.root / relative)
        return None if text is None else text.splitlines()

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
                if _is_code(relative):
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


def _last_part(symbol: str) -> str:
    # The last component is what a definition spells: `TaskStore.open` is defined as `def open`.
    return re.split(r"\.|::", symbol)[-1]


def _is_code(relative: str) -> bool:
    path = PurePosixPath(relative)
    return path.suffix in _CODE_SUFFIXES or path.name in _CODE_NAMES


def _text_of(path: Path) -> str | None:
    try:
        if path.is_symlink() or path.stat().st_size > MAX_FILE_BYTES:
            return None
        data = path.read_bytes()
    except OSError:
        return None
    if b"\0" in data[:4096]:
        return None
    return data.decode("utf-8", errors="replace")


def _words_of(path: Path) -> set[str]:
    text = _text_of(path)
    return set() if text is None else set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text))


def check(citations: Sequence[str], tree: TreeIndex) -> tuple[str, ...]:
    """Why the citations no longer hold in ``tree``: one reason each for a missing file or symbol."""
    reasons: list[str] = []
    symbols = [citation.partition(":")[2] for citation in citations if citation.startswith("symbol:")]
    for citation in citations:
        kind, _, value = citation.partition(":")
        if kind == "file" and not tree.has_file(value):
            reasons.append(f"cites {value}, which is not in the tree")
        elif kind == "symbol" and not tree.has_symbol(value):
            reasons.append(f"cites {value}, which no code file in the tree mentions")
        elif kind == "line":
            reasons.extend(_line_reasons(value, symbols, tree))
    return tuple(reasons)


def _line_reasons(value: str, symbols: Sequence[str], tree: TreeIndex) -> list[str]:
    path, _, number = value.rpartition(":")
    line = int(number)
    lines = tree.lines(path)
    if lines is None:
        return []  # a missing file is reported by its file citation
    if line > len(lines):
        return [f"cites {path}:{line}, but {path} has {len(lines)} lines"]
    nearby = " ".join(lines[max(0, line - 1 - LINE_SLACK):line + LINE_SLACK])
    if symbols and not any(re.search(rf"\b{re.escape(_last_part(symbol))}\b", nearby) for symbol in symbols):
        return [f"cites {path}:{line}, where {', '.join(symbols)} no longer is"]
    return []
