"""A program's output as a terminal would show it, and nothing a terminal would obey.

Test runners and build tools colour their output (many projects force it:
``addopts = ["--color=yes"]``), draw progress with carriage returns, and erase
lines. Shown raw, that is a wall of ``␛[32m``; obeyed raw, it could clear a
reviewer's screen or plant a link (see :mod:`errand._text`). This module keeps
what helps a reader and drops the rest:

* SGR sequences (``ESC [ … m``) become a :class:`Style`: bold, dim, italic,
  underline, and one of the 16 terminal colours for the text and its background
  (256-colour and RGB values are mapped to the nearest of the 16, so a page can
  draw them with classes its content-security policy allows).
* A carriage return moves back to the line's start and later text overwrites
  earlier cells; erase-in-line (``ESC [ K``) clears, a backspace steps back. So a
  progress bar collapses to its last state.
* Every other escape sequence (cursor moves, OSC titles, links, clipboard writes)
  is dropped (:func:`errand._text.strip_escapes`); any other control character
  is left for :func:`errand._text.printable` to show.

:class:`Lines` joins a stream's chunks into whole lines (a chunk may end mid-line
or mid-escape) and carries the style from one line to the next, as a terminal does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from errand._text import strip_escapes

__all__ = ["PLAIN", "Lines", "Run", "Style", "decode_line"]

#: SGR, and erase-in-line: the only sequences that change what is shown.
_KEPT = re.compile(r"\x1b\[([0-9;:]*)([mK])")
#: A line longer than this with no newline yet is shown in pieces rather than held back.
LONGEST_LINE = 65536
#: xterm's 16 colours, to map 256-colour and RGB values onto the nearest.
_PALETTE = ((0, 0, 0), (205, 0, 0), (0, 205, 0), (205, 205, 0), (0, 0, 238), (205, 0, 205), (0, 205, 205),
            (229, 229, 229), (127, 127, 127), (255, 0, 0), (0, 255, 0), (255, 255, 0), (92, 92, 255),
            (255, 0, 255), (0, 255, 255), (255, 255, 255))


@dataclass(frozen=True)
class Style:
    bold: bool = False
    dim: bool = False
    italic: bool = False
    underline: bool = False
    foreground: int | None = None  # 0–15, or the terminal's default
    background: int | None = None


PLAIN = Style()


@dataclass(frozen=True)
class Run:
    """Text of one style; it may still hold control characters for :func:`printable` to show."""

    text: str
    style: Style


def decode_line(line: str, style: Style = PLAIN) -> tuple[list[Run], Style]:
    """One line (no newline in it) as runs of styled text, and the style in force at its end."""
    cells: list[tuple[str, Style]] = []
    cursor = 0
    position = 0
    for match in _KEPT.finditer(line):
        cursor = _write(cells, cursor, line[position:match.start()], style)
        if match.group(2) == "m":
            style = _sgr(style, match.group(1))
        else:
            cells, cursor = _erase(cells, cursor, match.group(1))
        position = match.end()
    _write(cells, cursor, line[position:], style)
    return _runs(cells), style


def _write(cells: list[tuple[str, Style]], cursor: int, text: str, style: Style) -> int:
    for character in strip_escapes(text):
        if character == "\r":
            cursor = 0
        elif character == "\b":
            cursor = max(0, cursor - 1)
        elif cursor < len(cells):
            cells[cursor] = (character, style)
            cursor += 1
        else:
            cells.append((character, style))
            cursor += 1
    return cursor


def _erase(cells: list[tuple[str, Style]], cursor: int, mode: str) -> tuple[list[tuple[str, Style]], int]:
    if mode in ("", "0"):
        return cells[:cursor], cursor
    if mode == "1":
        return [(" ", PLAIN)] * cursor + cells[cursor:], cursor
    return [(" ", PLAIN)] * cursor, cursor  # 2: the whole line; the cursor stays where it was


def _runs(cells: list[tuple[str, Style]]) -> list[Run]:
    runs: list[Run] = []
    for character, style in cells:
        if runs and runs[-1].style == style:
            runs[-1] = Run(runs[-1].text + character, style)
        else:
            runs.append(Run(character, style))
    return runs


def _sgr(style: Style, parameters: str) -> Style:
    codes = [_code(text) for text in re.split("[;:]", parameters)] if parameters else [0]
    index = 0
    while index < len(codes):
        code = codes[index]
        if code in (38, 48):
            colour, used = _extended(codes[index + 1:])
            style = replace(style, foreground=colour) if code == 38 else replace(style, background=colour)
            index += 1 + used
            continue
        style = _simple(style, code)
        index += 1
    return style


_ATTRIBUTES = {1: {"bold": True}, 2: {"dim": True}, 3: {"italic": True}, 4: {"underline": True},
               22: {"bold": False, "dim": False}, 23: {"italic": False}, 24: {"underline": False},
               39: {"foreground": None}, 49: {"background": None}}


def _simple(style: Style, code: int) -> Style:
    if code == 0:
        return PLAIN
    if code in _ATTRIBUTES:
        return replace(style, **_ATTRIBUTES[code])  # type: ignore[arg-type]
    for base, offset in ((30, 0), (90, 8)):
        if base <= code <= base + 7:
            return replace(style, foreground=code - base + offset)
        if base + 10 <= code <= base + 17:
            return replace(style, background=code - base - 10 + offset)
    return style  # blink, inverse, fonts and the rest: nothing a reader needs


def _code(text: str) -> int:
    """One SGR parameter: empty is 0; anything but a few ASCII digits is no code at all (-1).
    (``int`` takes other scripts' digits, and refuses past 4,300 digits: output is the
    sandbox's, and a crafted escape must not crash whoever reads it.)"""
    if not text:
        return 0
    return int(text) if len(text) <= 6 and text.isascii() and text.isdigit() else -1


def _extended(codes: list[int]) -> tuple[int | None, int]:
    """A ``38;5;N`` or ``38;2;R;G;B`` colour (the codes after 38/48), and how many codes it took."""
    if codes[:1] == [5] and len(codes) >= 2:
        return _from_256(codes[1]), 2
    if codes[:1] == [2] and len(codes) >= 4:
        return _nearest(tuple(max(0, min(255, value)) for value in codes[1:4])), 4  # type: ignore[arg-type]
    return None, len(codes)


def _from_256(number: int) -> int | None:
    if not 0 <= number <= 255:
        return None
    if number < 16:
        return number
    if number >= 232:
        grey = 8 + (number - 232) * 10
        return _nearest((grey, grey, grey))
    number -= 16
    steps = (0, 95, 135, 175, 215, 255)
    return _nearest((steps[number // 36], steps[number // 6 % 6], steps[number % 6]))


def _nearest(rgb: tuple[int, int, int]) -> int:
    return min(range(16), key=lambda i: sum((a - b) ** 2 for a, b in zip(_PALETTE[i], rgb, strict=True)))


class Lines:
    """One output stream's chunks, joined into whole decoded lines (see the module)."""

    def __init__(self) -> None:
        self._pending = ""
        self._style = PLAIN

    def feed(self, chunk: str) -> list[list[Run]]:
        """The lines ``chunk`` completes; a trailing part without a newline waits for more."""
        *whole, self._pending = (self._pending + chunk).split("\n")
        lines = [self._decode(line) for line in whole]
        if len(self._pending) > LONGEST_LINE:
            lines += self.flush()
        return lines

    def flush(self) -> list[list[Run]]:
        """The unfinished last line, if any (the stream ended, or something else is shown next)."""
        rest, self._pending = self._pending, ""
        return [self._decode(rest)] if rest else []

    def _decode(self, line: str) -> list[Run]:
        runs, self._style = decode_line(line.removesuffix("\r"), self._style)
        return runs
