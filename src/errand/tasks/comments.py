"""Comments on lines of a task's diff, anchored so the next round sees what they are about.

A person (on the review page, with ``errand followup --comment``, or in a forge's
pull request review) comments on lines of one side of a diff: ``new`` (the file as
the work left it) or ``old`` (as it was at the base). :func:`anchor` checks each
comment against the diff it names — the path must be a file of the diff, the lines
must exist on that side — and quotes those lines, so the instruction
(:func:`errand.tasks.round.prompt.commented_instruction`) carries them with the comment.
It refuses the whole batch at the first bad comment: nothing is half sent.

Lines a hunk shows are quoted from the patch; lines between hunks (a page that
expands context shows them) from the file at the base commit, read from the
host's repository, with the patch's hunks applied for the new side. The patch is
the agent's text, and only ever read as text here.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from errand.errors import ConfigError
from errand.repo.git import diff_header_paths, unquote_path

__all__ = ["MAX_COMMENTS", "MAX_COMMENT_BYTES", "MAX_QUOTED", "LineComment", "Quoted", "Side", "anchor",
           "check_count", "quote_hunk", "quote_text"]

Side = Literal["new", "old"]
SIDES: tuple[Side, ...] = ("new", "old")
MAX_COMMENTS = 50  # per follow-up: past this a review is a new instruction, not comments
MAX_COMMENT_BYTES = 8_000
MAX_QUOTED = 40  # lines quoted per comment; a longer range is quoted by its first lines

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
ReadOld = Callable[[str], "str | None"]  # a path's text at the base commit, None if it cannot be read


@dataclass(frozen=True)
class Quoted:
    """One quoted line: its number on the comment's side, ``+``/``-`` if the diff changed it, and its text."""

    number: int
    mark: str
    text: str


@dataclass(frozen=True)
class LineComment:
    """A comment on lines ``start_line``..``end_line`` of ``path`` as ``side`` of the diff shows it
    (lines 0..0: a forge's comment on the file as a whole)."""

    path: str
    start_line: int
    end_line: int
    body: str
    side: Side = "new"
    author: str | None = None
    quoted: tuple[Quoted, ...] = field(default=())

    @classmethod
    def of(cls, path: object, start_line: object, end_line: object, body: object, side: object = "new",
           author: str | None = None) -> LineComment:
        """A comment checked for shape (not yet against a diff): a path, lines ``1 <= start <= end``,
        a body of some text and at most :data:`MAX_COMMENT_BYTES`, a side ``new`` or ``old``."""
        where = f"the comment on {path}:{start_line}" if isinstance(path, str) and path else "a comment"
        if not isinstance(path, str) or not path.strip() or "\x00" in path or len(path) > 4096:
            raise ConfigError(f"{where} needs the path of a file in the diff", code="unknown_path")
        if side not in SIDES:
            raise ConfigError(f"{where}: side is 'new' or 'old', not {side!r}", code="bad_lines")
        start, end = _line(start_line, where), _line(end_line, where)
        if end < start:
            raise ConfigError(f"{where}: its last line ({end}) is before its first ({start})", code="bad_lines")
        if not isinstance(body, str) or not body.strip():
            raise ConfigError(f"{where} needs some text", code="empty_text")
        if len(body.encode()) > MAX_COMMENT_BYTES:
            raise ConfigError(f"{where} is longer than {MAX_COMMENT_BYTES} bytes", code="too_long")
        return cls(path.strip(), start, end, body.strip(), side, author)  # type: ignore[arg-type]

    @property
    def lines(self) -> str:
        """``10`` or ``10-12``."""
        return str(self.start_line) if self.start_line == self.end_line else f"{self.start_line}-{self.end_line}"

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "side": self.side, "start_line": self.start_line, "end_line": self.end_line,
                "body": self.body, "author": self.author,
                "quoted": [[q.number, q.mark, q.text] for q in self.quoted]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LineComment:
        """A comment as :meth:`to_json` kept it (an event's), its quote included."""
        return cls(str(data["path"]), int(data["start_line"]), int(data["end_line"]), str(data["body"]),
                   "old" if data.get("side") == "old" else "new", data.get("author"),
                   tuple(Quoted(int(n), str(mark), str(text)) for n, mark, text in data.get("quoted") or ()))


def _line(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{where}: lines are numbered from 1, not {value!r}", code="bad_lines")
    return value


def check_count(comments: Sequence[object]) -> None:
    """Refuse more than :data:`MAX_COMMENTS` comments."""
    if len(comments) > MAX_COMMENTS:
        raise ConfigError(f"{len(comments)} comments are more than the {MAX_COMMENTS} one follow-up takes; "
                          "send the rest as another follow-up", code="too_many_comments")


# ------------------------------------------------------------------ the diff, read as text


@dataclass(frozen=True)
class _Hunk:
    old_start: int
    old_count: int
    new_start: int
    lines: tuple[str, ...]  # each starting with " ", "+" or "-"


@dataclass(frozen=True)
class _FileDiff:
    path: str
    old_path: str
    status: str  # added | deleted | modified | renamed | binary
    hunks: tuple[_Hunk, ...]


def _files(patch: str) -> list[_FileDiff]:
    chunks = re.split(r"^(?=diff --git )", patch, flags=re.MULTILINE)
    return [_file(chunk.split("\n")) for chunk in chunks if chunk.startswith("diff --git ")]


def _file(lines: list[str]) -> _FileDiff:
    old_path, new_path = diff_header_paths(lines[0]) or ("", "")
    status, hunks, index = "modified", [], 1
    while index < len(lines):
        line = lines[index]
        if header := _HUNK.match(line):
            body, index = _hunk_lines(lines, index + 1)
            hunks.append(_Hunk(int(header.group(1)), int(header.group(2) or 1), int(header.group(3)), body))
            continue
        if not hunks:
            status, old_path, new_path = _header(line, status, old_path, new_path)
        index += 1
    return _FileDiff(new_path, old_path, status, tuple(hunks))


def _header(line: str, status: str, old_path: str, new_path: str) -> tuple[str, str, str]:
    if line.startswith("new file mode"):
        return "added", old_path, new_path
    if line.startswith("deleted file mode"):
        return "deleted", old_path, new_path
    if line.startswith("rename from "):
        return "renamed", unquote_path(line[len("rename from "):]), new_path
    if line.startswith("rename to "):
        return "renamed", old_path, unquote_path(line[len("rename to "):])
    if line.startswith(("Binary files", "GIT binary patch")):
        return "binary", old_path, new_path
    if line.startswith("--- a/"):
        return status, line[6:].rstrip("\t"), new_path
    if line.startswith("+++ b/"):
        return status, old_path, line[6:].rstrip("\t")
    return status, old_path, new_path


def _hunk_lines(lines: list[str], index: int) -> tuple[tuple[str, ...], int]:
    body = []
    while index < len(lines) and lines[index][:1] in (" ", "+", "-", "\\") and not _HUNK.match(lines[index]):
        if lines[index][:1] != "\\":  # "\ No newline at end of file"
            body.append(lines[index])
        index += 1
    return tuple(body), index


def _shown(diff: _FileDiff, side: Side) -> dict[int, Quoted]:
    """The lines of ``side`` the hunks show, by number."""
    shown: dict[int, Quoted] = {}
    for hunk in diff.hunks:
        old, new = hunk.old_start, hunk.new_start
        for text in hunk.lines:
            mark, rest = text[0], text[1:]
            if mark in " -" and side == "old":
                shown[old] = Quoted(old, "-" if mark == "-" else " ", rest)
            if mark in " +" and side == "new":
                shown[new] = Quoted(new, "+" if mark == "+" else " ", rest)
            old += mark in " -"
            new += mark in " +"
    return shown


def _whole(diff: _FileDiff, side: Side, old_text: str | None) -> dict[int, Quoted] | None:
    """Every line of ``side``: the base's text with the hunks applied for the new side; ``None``
    where the base's text is not to be had (or is not what the patch was made against)."""
    if diff.status == "added" or (diff.status == "deleted" and side == "new"):
        return {}
    if old_text is None:
        return None
    old = old_text.split("\n")
    if old and old[-1] == "":
        old.pop()
    if side == "old":
        return {n: Quoted(n, " ", text) for n, text in enumerate(old, start=1)}
    new, position = [], 0
    for hunk in diff.hunks:
        upto = hunk.old_start if hunk.old_count == 0 else hunk.old_start - 1
        new += [(" ", text) for text in old[position:upto]]
        position = upto
        for line in hunk.lines:
            if line[0] in " -":
                if position >= len(old) or old[position] != line[1:]:
                    return None  # the file at the base is not the one the patch changes
                position += 1
            if line[0] in " +":
                new.append((line[0], line[1:]))
    new += [(" ", text) for text in old[position:]]
    return {n: Quoted(n, "+" if mark == "+" else " ", text) for n, (mark, text) in enumerate(new, start=1)}


# ------------------------------------------------------------------ anchoring


def quote_hunk(diff_hunk: str, side: Side, start: int, end: int) -> tuple[Quoted, ...]:
    """Lines ``start``..``end`` of ``side`` that a forge's ``diff_hunk`` (a hunk header and its lines
    up to the one commented on) shows; those it does not show are left out."""
    shown = _shown(_file(["diff --git a/f b/f", *diff_hunk.split("\n")]), side)
    return tuple(shown[n] for n in range(start, end + 1)[:MAX_QUOTED] if n in shown)


def quote_text(text: str, start: int, end: int) -> tuple[Quoted, ...]:
    """Lines ``start``..``end`` of a file's ``text`` (those it has)."""
    lines = text.removesuffix("\n").split("\n")
    return tuple(Quoted(n, " ", lines[n - 1]) for n in range(start, end + 1)[:MAX_QUOTED] if n <= len(lines))


def anchor(patch: str, comments: Iterable[LineComment], read_old: ReadOld) -> list[LineComment]:
    """``comments`` with the lines they are about quoted, each checked against ``patch``; the first
    that names a file the patch does not change, or lines its side does not have, is refused
    (:class:`ConfigError`, code ``unknown_path`` or ``bad_lines``)."""
    files = _files(patch)
    by_path = {f.old_path: f for f in files} | {f.path: f for f in files}  # a new path wins over an old one
    anchored = []
    for comment in comments:
        diff = by_path.get(comment.path)
        if diff is None:
            changed = ", ".join(sorted(f.path for f in files)[:10]) or "none"
            raise ConfigError(f"{comment.path} is not a file of the task's diff (its files: {changed})",
                              code="unknown_path")
        anchored.append(replace(comment, path=diff.path if comment.side == "new" else diff.old_path,
                                quoted=_quote(diff, comment, read_old)))
    return anchored


def _quote(diff: _FileDiff, comment: LineComment, read_old: ReadOld) -> tuple[Quoted, ...]:
    if diff.status == "binary":
        raise ConfigError(f"{comment.path} is a binary file: it has no lines to comment on", code="bad_lines")
    shown = _shown(diff, comment.side)
    wanted = range(comment.start_line, comment.end_line + 1)
    if not all(n in shown for n in wanted):
        whole = _whole(diff, comment.side, read_old(diff.old_path))
        if whole is not None:
            shown = {**whole, **shown}
    missing = next((n for n in wanted if n not in shown), None)  # never past the file's length + 1
    if missing is not None and comment.start_line == comment.end_line:
        raise ConfigError(f"{comment.path} has no line {missing} on its {comment.side} side ({_extent(shown)})",
                          code="bad_lines")
    if missing is not None:
        raise ConfigError(f"lines {comment.lines} of {comment.path} ({comment.side} side): line {missing} is not "
                          f"there ({_extent(shown)})", code="bad_lines")
    return tuple(shown[n] for n in wanted[:MAX_QUOTED])


def _extent(shown: Mapping[int, Quoted]) -> str:
    if not shown:
        return "that side of the file is empty"
    numbers = sorted(shown)
    spans, first, last = [], numbers[0], numbers[0]
    for n in numbers[1:]:
        if n != last + 1:
            spans.append((first, last))
            first = n
        last = n
    spans.append((first, last))
    return "it has lines " + ", ".join(f"{a}-{b}" if a != b else str(a) for a, b in spans[:8])
