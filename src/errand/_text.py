"""Text the agent controls, made safe to show: every character a terminal would act on, shown instead.

The agent writes file contents and names, summaries, questions, command lines
and their output. A terminal obeys what such text carries — ``ESC[2J`` clears
the screen, cursor-up + erase-line hides lines of a diff, OSC 8 fakes a link,
OSC 52 writes the clipboard, a CR overwrites a line — and a bidi override
(U+202E and friends) reorders what the reader sees. :func:`printable` is the
one place such text is made safe; every face passes agent text through it
before printing, and accepting a diff passes the commit message through it.

A character is shown, never dropped, so a reviewer sees that it is there:

* C0 controls and DEL become their Unicode *control pictures* (``ESC`` →
  ``␛``, CR → ``␍``, DEL → ``␡``): one column each, so a diff's layout holds,
  and never confused with the four characters ``\\x1b`` that source code
  spells out all the time (a diff of a colour library would otherwise be
  ambiguous).
* Characters with no picture — C1 controls (U+0080–U+009F; U+009B is a
  one-character CSI), format characters (Unicode category Cf: bidi
  embeddings, overrides and isolates, zero-width spaces and joiners, the
  BOM, tag characters), line and paragraph separators, lone surrogates —
  become ``<U+202E>``.

Newline and tab are kept (``lines=False`` shows newlines too, for a field
that must stay on one line). JSON output needs none of this: ``json.dumps``
escapes every control character itself and keeps the data exact.

:func:`strip_escapes` is the other half: text a program *reads* (a test runner's
summary, a report) has every terminal escape sequence removed first, so colour
forced on by a project's config (``--color=yes``) cannot hide a word from a parser.
"""

from __future__ import annotations

import functools
import re
import unicodedata

__all__ = ["printable", "strip_escapes"]

# Runs of everything outside printable ASCII; only those characters are looked at one by one.
_SUSPECT = re.compile(r"[^\x20-\x7e\t]+")
_SHOWN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
_CONTROL_PICTURES = 0x2400  # U+2400 SYMBOL FOR NULL .. U+241F SYMBOL FOR UNIT SEPARATOR
_DELETE_PICTURE = "\u2421"

# ECMA-48 escape sequences, 7-bit (ESC …) and 8-bit (C1) forms. String sequences (OSC, DCS,
# SOS, PM, APC) end at BEL or ST; one left open ends at the line's end, so it cannot swallow
# the lines after it. Whatever is left of an escape (a lone ESC, a C1 control) goes too.
_ESCAPES = re.compile(
    r"(?:\x1b\[|\x9b)[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]"  # CSI: colours, cursor moves, erases
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c\n]*(?:\x07|\x1b\\|\x9c)?"  # OSC, DCS, SOS, PM, APC
    r"|\x1b[\x20-\x2f]*[\x30-\x7e]"  # two-character escapes: ESC 7, ESC ( B, ESC c
    r"|[\x1b\x80-\x9f]"  # a lone ESC, any other C1 control
)


def printable(text: str, *, lines: bool = True) -> str:
    """``text`` with every control, format and separator character shown as a visible stand-in.

    Ordinary text (any script, emoji, combining marks, non-breaking spaces) is
    returned unchanged; so is a newline unless ``lines`` is false, and a tab.
    """
    if _plain(text):
        return text if lines or "\n" not in text else text.replace("\n", _shown("\n"))
    # Line by line, so a large diff with one odd character costs one slow line, not a slow diff.
    shown = (line if _plain(line) else _SUSPECT.sub(_replace_run, line) for line in text.split("\n"))
    return ("\n" if lines else _shown("\n")).join(shown)


def _plain(text: str) -> bool:
    """No character in ``text`` but tabs, newlines and what :meth:`str.isprintable` passes (checked in C)."""
    return text.replace("\t", " ").replace("\n", " ").isprintable()


def _replace_run(match: re.Match[str]) -> str:
    return "".join(_shown(character) for character in match.group())


@functools.lru_cache(maxsize=4096)
def _shown(character: str) -> str:
    code = ord(character)
    if code < 0x20:
        return chr(_CONTROL_PICTURES + code)
    if code == 0x7F:
        return _DELETE_PICTURE
    if unicodedata.category(character) in _SHOWN_CATEGORIES:
        return f"<U+{code:04X}>"
    return character


def strip_escapes(text: str) -> str:
    """``text`` without any terminal escape sequence (CSI, OSC, DCS and the rest, 7- and 8-bit,
    a lone ESC included): what every parser of a program's output reads."""
    return _ESCAPES.sub("", text) if ("\x1b" in text or not text.isascii()) else text
