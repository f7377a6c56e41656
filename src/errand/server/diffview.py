"""A patch made readable: split per file, syntax-highlighted, with a whitespace-blind view.

The patch is the text the agent's run produced (``git diff`` output). Hiding
whitespace cannot re-run git (the working copy is gone once the run ends), so it
works on the patch: within each block of removed and added lines, a removed line
and an added line that differ only in whitespace are shown as one unchanged line.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, replace
from typing import Literal

from markupsafe import Markup, escape
from pygments import format as format_tokens
from pygments.formatters import HtmlFormatter
from pygments.lexer import Lexer
from pygments.lexers import TextLexer, get_lexer_for_filename
from pygments.util import ClassNotFound

from errand._text import printable

__all__ = ["FileDiff", "Line", "css", "hide_whitespace", "highlight", "parse"]

Kind = Literal["context", "add", "del", "hunk", "note"]
_HUNK = re.compile(r"^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@")
HIGHLIGHT_LIMIT = 4000  # lines per file; past this a file is shown plain


@dataclass(frozen=True)
class Line:
    kind: Kind
    text: str
    old: int | None = None
    new: int | None = None
    html: Markup | None = None


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
            status, old_path = "renamed", line[len("rename from "):]
        elif line.startswith("rename to "):
            new_path = line[len("rename to "):]
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
    match = re.match(r'^diff --git "?a/(.*?)"? "?b/(.*?)"?$', header)
    return (match.group(1), match.group(2)) if match else (header, header)


def _strip_prefix(name: str) -> str:
    name = name.strip().strip('"')
    return name[2:] if name[:2] in ("a/", "b/") else name


def _body(lines: list[str]) -> list[Line]:
    out: list[Line] = []
    old = new = 0
    for line in lines:
        if match := _HUNK.match(line):
            old, new = int(match.group(1)), int(match.group(2))
            out.append(Line("hunk", line))
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
    """The same files with each line's HTML, highlighted by the language its name suggests."""
    formatter = HtmlFormatter(nowrap=True, classprefix="hl-")
    return [replace(f, lines=tuple(_highlighted(f, formatter))) for f in files]


def _highlighted(file: FileDiff, formatter: HtmlFormatter[str]) -> list[Line]:
    lexer = _lexer(file.path) if len(file.lines) <= HIGHLIGHT_LIMIT else None
    out = []
    for line in file.lines:
        if lexer is None or line.kind in ("hunk", "note"):
            html = Markup(escape(line.text))
        else:
            html = Markup(format_tokens(lexer.get_tokens(line.text), formatter).rstrip("\n"))
        out.append(replace(line, html=html))
    return out


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
