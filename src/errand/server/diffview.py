"""A patch made readable: split per file, syntax-highlighted, with a whitespace-blind view.

The patch is the text the agent's run produced (``git diff`` output). Hiding
whitespace cannot re-run git (the working copy is gone once the run ends), so it
works on the patch: within each block of removed and added lines, a removed line
and an added line that differ only in whitespace are shown as one unchanged line.

Within such a block the n-th removed line is paired with the n-th added one, as a
pull request's diff does, and the words that differ between them are marked
(:func:`highlight`). Files a reviewer rarely reads line by line — deleted ones,
generated ones (lockfiles, minified bundles), large ones — say so
(:attr:`FileDiff.collapsed`), and the page shows them closed.

A diff can be huge (thousands of files, a file of 300,000 lines), so the review page is
budgeted (:func:`budget`): it lists at most :data:`PAGE_FILES` files at a time and draws at
most :data:`PAGE_LINES` lines; closed files and those past the budget are not drawn but
loaded when opened, one at a time, each drawn up to :data:`FILE_LINES` lines.
"""

from __future__ import annotations

import collections
import difflib
import hashlib
import itertools
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Literal

from markupsafe import Markup, escape
from pygments.formatters import HtmlFormatter
from pygments.lexer import Lexer
from pygments.lexers import TextLexer, get_lexer_for_filename
from pygments.token import STANDARD_TYPES, Token, _TokenType
from pygments.util import ClassNotFound

from errand._text import printable
from errand.repo.git import diff_header_paths, unquote_path

__all__ = ["FILE_LINES", "LARGE", "PAGE_FILES", "PAGE_LINES", "Budgeted", "FileDiff", "Line", "TreeEntry",
           "base_lines", "budget", "css", "generated", "hide_whitespace", "highlight", "parse", "tree"]

Kind = Literal["context", "add", "del", "hunk", "note"]
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
HIGHLIGHT_LIMIT = 4000  # lines per file; past this a file is shown plain (no colours, no word marks)
LARGE = 400  # changed lines: a file with more is shown closed
WORDS_LIMIT = 500  # characters: longer lines get no word-level marks (a minified line is one long word list)
_WORD = re.compile(r"\w+|\s+|[^\w\s]")
#: Files a tool writes, not a person: a lockfile's diff is read as "the lockfile changed".
LOCKFILES = frozenset({
    "package-lock.json", "npm-shrinkwrap.json", "yarn.lock", "pnpm-lock.yaml", "bun.lockb", "poetry.lock",
    "Pipfile.lock", "uv.lock", "pdm.lock", "Cargo.lock", "Gemfile.lock", "composer.lock", "go.sum", "flake.lock",
    "mix.lock", "pubspec.lock", "Podfile.lock", "packages.lock.json", "gradle.lockfile", "conda-lock.yml"})
GENERATED_SUFFIXES = (".min.js", ".min.css", ".js.map", ".css.map", ".pb.go", "_pb2.py", "_pb2.pyi", ".snap")
MINIFIED_LINE = 1000  # characters: a line this long in a file's additions means it was minified
PAGE_FILES = 300  # files one review page lists (a pull request's page lists as many); the rest on the next pages
PAGE_LINES = 3000  # lines one review page draws; the files past them load when opened
FILE_LINES = 5000  # lines one opened file draws; past them, the whole diff is the raw patch


@dataclass(frozen=True)
class Line:
    kind: Kind
    text: str
    old: int | None = None  # a hunk header: the first old line it covers
    new: int | None = None
    html: Markup | None = None
    words: tuple[tuple[int, int], ...] = ()  # the spans of ``text`` that differ from its paired line


@dataclass(frozen=True)
class FileDiff:
    path: str
    old_path: str | None
    status: str  # added, deleted, renamed, modified
    binary: bool
    lines: tuple[Line, ...]

    @property
    def additions(self) -> int:
        return sum(line.kind == "add" for line in self.lines)

    @property
    def deletions(self) -> int:
        return sum(line.kind == "del" for line in self.lines)

    @property
    def collapsed(self) -> str | None:
        """Why the page shows this file closed (None: it is shown open)."""
        if self.status == "deleted":
            return "deleted"
        if why := generated(self):
            return f"generated: {why}"
        if (changed := self.additions + self.deletions) > LARGE:
            return f"large: {changed} changed lines"
        return None

    @property
    def digest(self) -> str:
        """Names this file's change: a person's "viewed" mark holds while the digest does."""
        text = "\n".join(f"{line.kind}{line.text}" for line in self.lines)
        return hashlib.sha256(f"{self.path}\0{text}".encode(errors="surrogateescape")).hexdigest()[:16]

    @property
    def has_base(self) -> bool:
        """Whether the file existed at the base with lines (its base text can be read)."""
        return self.status != "added" and not self.binary and any(line.kind == "hunk" for line in self.lines)

    @property
    def expandable(self) -> bool:
        """Whether more of the file's base can be shown around its hunks (a deleted file's hunk is
        the whole of it: there is nothing more to show)."""
        return self.has_base and self.status != "deleted"


def generated(file: FileDiff) -> str | None:
    """Why ``file`` looks written by a tool (a lockfile, a minified or generated file), or None."""
    name = file.path.rpartition("/")[2]
    if name in LOCKFILES:
        return "lockfile"
    if name.endswith(GENERATED_SUFFIXES):
        return "minified or generated"
    added = [line.text for line in file.lines if line.kind == "add"]
    if any(len(text) > MINIFIED_LINE for text in added):
        return "minified"
    if any("@generated" in text or "DO NOT EDIT" in text for text in added[:5]):
        return "marked as generated"
    return None


def parse(patch: str) -> list[FileDiff]:
    """The files of a git patch, in order, every control and bidi character shown visibly
    (the agent wrote the patch: a U+202E could reorder what a reviewer reads)."""
    chunks = re.split(r"^(?=diff --git )", printable(patch), flags=re.MULTILINE)
    return [_file(chunk.splitlines()) for chunk in chunks if chunk.startswith("diff --git ")]


def _file(lines: list[str]) -> FileDiff:
    old_path, new_path = _header_paths(lines[0])
    status, binary, body_start = "modified", False, len(lines)
    for index, line in enumerate(lines[1:], start=1):
        if line.startswith("new file mode"):
            status = "added"
        elif line.startswith("deleted file mode"):
            status = "deleted"
        elif line.startswith("rename from "):
            status, old_path = "renamed", unquote_path(line[len("rename from "):])
        elif line.startswith("rename to "):
            new_path = unquote_path(line[len("rename to "):])
        elif line.startswith(("Binary files", "GIT binary patch")):
            binary = True
        elif line.startswith("--- ") and not line.startswith("--- /dev/null"):
            old_path = _strip_prefix(line[4:])
        elif line.startswith("+++ ") and not line.startswith("+++ /dev/null"):
            new_path = _strip_prefix(line[4:])
        elif line.startswith("@@"):
            body_start = index
            break
    path = old_path if status == "deleted" else new_path
    return FileDiff(path=path, old_path=old_path if status == "renamed" else None, status=status, binary=binary,
                    lines=tuple(_body(lines[body_start:])))


def _header_paths(header: str) -> tuple[str, str]:
    return diff_header_paths(header) or (header, header)


def _strip_prefix(name: str) -> str:
    name = unquote_path(name.rstrip("\t").strip())
    return name[2:] if name[:2] in ("a/", "b/") else name


def _body(lines: list[str]) -> list[Line]:
    out: list[Line] = []
    old = new = 0
    for line in lines:
        if match := _HUNK.match(line):
            old, new = int(match.group(1)), int(match.group(3))
            # A hunk that covers no line of a side names the line before its place ("-5,0": after 5).
            out.append(Line("hunk", line, old=old + (match.group(2) == "0"), new=new + (match.group(4) == "0")))
        elif line.startswith("+"):
            out.append(Line("add", line[1:], new=new))
            new += 1
        elif line.startswith("-"):
            out.append(Line("del", line[1:], old=old))
            old += 1
        elif line.startswith("\\"):
            out.append(Line("note", line[2:]))
        else:
            out.append(Line("context", line[1:], old=old, new=new))
            old += 1
            new += 1
    return out


def hide_whitespace(files: list[FileDiff]) -> list[FileDiff]:
    """The same files with changes that only touch whitespace shown as unchanged lines."""
    return [replace(f, lines=tuple(_merge_blocks(list(f.lines)))) for f in files]


def _merge_blocks(lines: list[Line]) -> list[Line]:
    out: list[Line] = []
    index = 0
    while index < len(lines):
        if lines[index].kind not in ("add", "del"):
            out.append(lines[index])
            index += 1
            continue
        end = index
        while end < len(lines) and lines[end].kind in ("add", "del"):
            end += 1
        out += _merge(lines[index:end])
        index = end
    return out


def _merge(block: list[Line]) -> list[Line]:
    removed = [line for line in block if line.kind == "del"]
    added = [line for line in block if line.kind == "add"]
    matcher = difflib.SequenceMatcher(None, [_squash(line.text) for line in removed],
                                      [_squash(line.text) for line in added], autojunk=False)
    out: list[Line] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            out += [Line("context", a.text, old=r.old, new=a.new) for r, a in zip(removed[i1:i2], added[j1:j2],
                                                                                   strict=True)]
        else:
            out += removed[i1:i2] + added[j1:j2]
    return out


def _squash(text: str) -> str:
    return "".join(text.split())


def highlight(files: list[FileDiff]) -> list[FileDiff]:
    """The same files with each line's HTML, highlighted by the language its name suggests,
    and the words that changed between a removed line and the added line paired with it marked."""
    return [replace(f, lines=tuple(_highlighted(f))) for f in files]


def _highlighted(file: FileDiff) -> list[Line]:
    small = len(file.lines) <= HIGHLIGHT_LIMIT  # past it, plain text: no colours, no word marks
    lexer = _lexer(file.path) if small else None
    out = []
    for line in _with_words(list(file.lines)) if small else file.lines:
        if line.kind in ("hunk", "note"):
            out.append(replace(line, html=Markup(escape(line.text))))
        else:
            out.append(replace(line, html=_html(_tokens(lexer, line.text), line.words)))
    return out


def _with_words(lines: list[Line]) -> Iterator[Line]:
    """Each block of removed then added lines with its n-th removed and n-th added line's
    differing words marked (a pull request pairs them the same way)."""
    index = 0
    while index < len(lines):
        end = index
        while end < len(lines) and lines[end].kind in ("add", "del"):
            end += 1
        if end == index:
            yield lines[index]
            index += 1
            continue
        block = lines[index:end]
        removed = [n for n, line in enumerate(block) if line.kind == "del"]
        added = [n for n, line in enumerate(block) if line.kind == "add"]
        for old_at, new_at in zip(removed, added, strict=False):
            if spans := _word_spans(block[old_at].text, block[new_at].text):
                block[old_at], block[new_at] = replace(block[old_at], words=spans[0]), replace(block[new_at],
                                                                                                  words=spans[1])
        yield from block
        index = end


Spans = tuple[tuple[int, int], ...]


def _word_spans(removed: str, added: str) -> tuple[Spans, Spans] | None:
    """The character spans of the words that differ, in each line; None when the lines are
    too unlike for marks to help (a rewrite reads better whole) or too long to compare."""
    if len(removed) > WORDS_LIMIT or len(added) > WORDS_LIMIT:
        return None
    old_words, new_words = _WORD.findall(removed), _WORD.findall(added)
    if _most_alike(old_words, new_words) < 0.5:
        return None  # too unlike whatever their order: no matcher (its cost grows fast on unlike lines)
    matcher = difflib.SequenceMatcher(None, old_words, new_words, autojunk=False)
    if _likeness(matcher, old_words, new_words) < 0.5:
        return None
    old_at, new_at = _offsets(old_words), _offsets(new_words)
    old_spans: list[tuple[int, int]] = []
    new_spans: list[tuple[int, int]] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            if i2 > i1:
                old_spans.append((old_at[i1], old_at[i2]))
            if j2 > j1:
                new_spans.append((new_at[j1], new_at[j2]))
    return (tuple(old_spans), tuple(new_spans)) if old_spans or new_spans else None


def _most_alike(old_words: list[str], new_words: list[str]) -> float:
    """An upper bound of :func:`_likeness` in linear time: the words the lines share, in any order."""
    shared = collections.Counter(w for w in old_words if not w.isspace()) & \
        collections.Counter(w for w in new_words if not w.isspace())
    total = sum(len(word.strip()) for word in old_words + new_words)
    return 2 * sum(len(word) * count for word, count in shared.items()) / total if total else 1.0


def _likeness(matcher: difflib.SequenceMatcher[str], old_words: list[str], new_words: list[str]) -> float:
    """How much of the two lines' text, spaces aside, is the same (the spaces between words
    match in any two sentences)."""
    same = sum(len(word.strip()) for block in matcher.get_matching_blocks()
               for word in old_words[block.a:block.a + block.size])
    total = sum(len(word.strip()) for word in old_words + new_words)
    return 2 * same / total if total else 1.0


def _offsets(words: list[str]) -> list[int]:
    offsets = [0]
    for word in words:
        offsets.append(offsets[-1] + len(word))
    return offsets


def _tokens(lexer: Lexer | None, text: str) -> list[tuple[_TokenType, str]]:
    if lexer is None:
        return [(Token.Text, text)]
    tokens = list(lexer.get_tokens(text))
    if "".join(value for _, value in tokens) != text:  # a lexer that rewrote the text: the marks would drift
        return [(Token.Text, text)]
    return tokens


def _html(tokens: Iterable[tuple[_TokenType, str]], words: Spans) -> Markup:
    """The tokens as spans of their highlighting class; the parts inside ``words`` wrapped in
    ``<span class="w">`` (split at token edges, so the markup nests)."""
    out: list[str] = []
    position = 0
    for token_type, value in tokens:
        css_class = _css_class(token_type)
        for start, end, changed in _pieces(position, position + len(value), words):
            piece = str(escape(value[start - position:end - position]))
            if css_class:
                piece = f'<span class="hl-{css_class}">{piece}</span>'
            out.append(f'<span class="w">{piece}</span>' if changed else piece)
        position += len(value)
    return Markup("".join(out))


def _pieces(start: int, end: int, words: Spans) -> Iterator[tuple[int, int, bool]]:
    cuts = sorted({start, end, *(edge for span in words for edge in span if start < edge < end)})
    for left, right in itertools.pairwise(cuts):
        yield left, right, any(a <= left and right <= b for a, b in words)


def _css_class(token_type: _TokenType) -> str:
    while token_type not in STANDARD_TYPES and token_type.parent is not None:
        token_type = token_type.parent
    return STANDARD_TYPES.get(token_type, "")


def base_lines(path: str, text: str, start: int, end: int) -> tuple[int, list[Line]]:
    """Lines ``start``..``end`` (1-based, inclusive) of the base's ``text`` of ``path``, highlighted,
    as unchanged lines numbered on the old side; and how many lines the file has."""
    lines = printable(text).splitlines()
    lexer = _lexer(path)
    shown = [Line("context", line, old=number, html=_html(_tokens(lexer, line), ()))
             for number, line in enumerate(lines[start - 1:end], start=start)]
    return len(lines), shown


@dataclass(frozen=True)
class Budgeted:
    """One page of a diff as the review draws it: ``files`` (the page's, from number ``first``
    of ``total``), of which those numbered in ``drawn`` are drawn (and highlighted); the others
    load when opened."""

    files: list[FileDiff]
    first: int
    total: int
    drawn: frozenset[int]
    deferred_by_budget: int  # files not drawn only because the page's line budget was spent

    @property
    def last(self) -> int:
        return self.first + len(self.files) - 1


def budget(files: list[FileDiff], first: int = 1) -> Budgeted:
    """The page of ``files`` that starts at file number ``first`` (1-based), each open file drawn
    while the page's :data:`PAGE_LINES` last, in order; closed files are never drawn inline."""
    first = max(1, min(first, len(files)))
    page = files[first - 1:first - 1 + PAGE_FILES]
    drawn: set[int] = set()
    spent = over = 0
    for number, file in enumerate(page, start=first):
        if file.collapsed:
            continue
        if spent + len(file.lines) > PAGE_LINES and spent:
            over += 1
            continue
        spent += len(file.lines)
        drawn.add(number)
    highlighted = highlight([file for number, file in enumerate(page, start=first) if number in drawn])
    marked = iter(highlighted)
    page = [next(marked) if number in drawn else file for number, file in enumerate(page, start=first)]
    return Budgeted(page, first, len(files), frozenset(drawn), over)


def one_file(file: FileDiff) -> tuple[FileDiff, int]:
    """``file`` highlighted as an opened file shows it: at most :data:`FILE_LINES` lines; and how
    many lines that leaves out."""
    [shown] = highlight([replace(file, lines=file.lines[:FILE_LINES])])
    return shown, sum(line.kind not in ("hunk", "note") for line in file.lines[FILE_LINES:])


@dataclass(frozen=True)
class TreeEntry:
    """One row of the file tree: a directory (``file`` None) or a file, at its depth."""

    name: str
    depth: int
    file: FileDiff | None = None
    index: int = 0  # the file's place in the diff, from 1


def tree(files: list[FileDiff], first: int = 1) -> list[TreeEntry]:
    """The files as a tree, in the diff's order (git's: by path, so a directory's files are
    together), each directory named once above its files; numbered from ``first``."""
    entries: list[TreeEntry] = []
    shown: list[str] = []
    for index, file in enumerate(files, start=first):
        *directories, name = file.path.split("/")
        common = 0
        while common < min(len(shown), len(directories)) and shown[common] == directories[common]:
            common += 1
        entries += [TreeEntry(directory + "/", depth) for depth, directory in enumerate(directories[common:],
                                                                                         start=common)]
        shown = directories
        entries.append(TreeEntry(name, len(directories), file, index))
    return entries


def _lexer(path: str) -> Lexer:
    try:
        lexer: Lexer = get_lexer_for_filename(path, stripnl=False, ensurenl=False)
    except ClassNotFound:
        lexer = TextLexer(stripnl=False, ensurenl=False)
    return lexer


def css() -> str:
    """The highlighting's stylesheet (light, with a dark variant for dark colour schemes)."""
    light = HtmlFormatter(style="default", classprefix="hl-").get_style_defs(".code")  # type: ignore[no-untyped-call]
    dark = HtmlFormatter(style="monokai", classprefix="hl-").get_style_defs(".code")  # type: ignore[no-untyped-call]
    return f"{light}\n@media (prefers-color-scheme: dark) {{\n{dark}\n}}\n"
