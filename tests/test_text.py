"""errand._text.printable: what a terminal would obey is shown instead, and nothing else changes."""

from __future__ import annotations

import sys
import unicodedata

import pytest

from errand._text import printable


def test_ordinary_text_is_returned_as_it_is() -> None:
    text = ("def f(x):\n\treturn x  # naïve café, 日本語, Ελληνικά, עברית, العربية, emoji 👍🏽, "
            "combining e\u0301, no-break\u00a0space, ideographic\u3000space, private \ue000\n")
    assert printable(text) == text


@pytest.mark.parametrize("code", [*range(0x20), 0x7F])
def test_every_c0_control_and_del_becomes_its_picture(code: int) -> None:
    if chr(code) in "\n\t":
        assert printable(f"a{chr(code)}b") == f"a{chr(code)}b"
    else:
        shown = printable(f"a{chr(code)}b")
        assert shown == f"a{chr(0x2421 if code == 0x7F else 0x2400 + code)}b"
        assert unicodedata.name(shown[1]).startswith("SYMBOL FOR ")


def test_escape_sequences_lose_their_escape() -> None:
    assert printable("\x1b[2J\x1b[1A\x1b[2K\x1b]8;;https://e.test/\x07x\x1b]8;;\x07\x1b]52;c;eA==\x1b\\") == (
        "␛[2J␛[1A␛[2K␛]8;;https://e.test/␇x␛]8;;␇␛]52;c;eA==␛\\")
    assert printable("shown\roverwritten") == "shown␍overwritten"


@pytest.mark.parametrize("code", range(0x80, 0xA0))
def test_c1_controls_are_named_by_code_point(code: int) -> None:
    assert printable(f"a{chr(code)}b") == f"a<U+{code:04X}>b"


@pytest.mark.parametrize("character", [
    "\u202a", "\u202b", "\u202c", "\u202d", "\u202e",  # bidi embeddings and overrides
    "\u2066", "\u2067", "\u2068", "\u2069",  # bidi isolates
    "\u200e", "\u200f", "\u061c",  # directional marks
    "\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad",  # invisible: zero-width, joiners, BOM, soft hyphen
    "\U000e0041",  # a tag character
    "\u2028", "\u2029",  # line and paragraph separators
    "\ud800",  # a lone surrogate (it would not even encode)
])
def test_format_and_separator_characters_are_named(character: str) -> None:
    assert printable(f"a{character}b") == f"a<U+{ord(character):04X}>b"


def test_every_format_character_of_this_python_is_shown() -> None:
    shown = [chr(c) for c in range(sys.maxunicode + 1)
             if unicodedata.category(chr(c)) in ("Cc", "Cf", "Cs", "Zl", "Zp") and chr(c) not in "\n\t"]
    assert len(shown) > 300
    assert all(printable(c).isprintable() for c in shown)
    printable("".join(shown)).encode("utf-8")  # no lone surrogate survives to fail the terminal's encoding


def test_one_line_fields_show_their_newlines() -> None:
    assert printable("a.py\n  tests after: pass", lines=False) == "a.py␊  tests after: pass"
    assert printable("a\n\x1bb", lines=False) == "a␊␛b"
    assert printable("a\tb", lines=False) == "a\tb"


def test_a_large_diff_with_one_bad_line_changes_only_that_line() -> None:
    lines = ["+    return a + b  # 日本語"] * 50_000
    lines[25_000] = "+\x1b[1A\x1b[2Khidden"
    shown = printable("\n".join(lines)).split("\n")
    assert shown[25_000] == "+␛[1A␛[2Khidden"
    assert shown[:25_000] == lines[:25_000] and shown[25_001:] == lines[25_001:]


def test_showing_twice_changes_nothing_more() -> None:
    once = printable("\x1b[31m\u202e\r\x00")
    assert printable(once) == once
