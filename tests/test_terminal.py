"""Program output as a terminal shows it (errand._terminal): colours kept, progress collapsed,
everything else a terminal would obey dropped, chunks joined into lines."""

from __future__ import annotations

from errand._terminal import PLAIN, Lines, Run, Style, decode_line


def text_of(runs: list[Run]) -> str:
    return "".join(run.text for run in runs)


def test_colours_and_attributes() -> None:
    runs, end = decode_line("\x1b[32m.\x1b[0m\x1b[1;31mF\x1b[0m ok")
    assert runs == [Run(".", Style(foreground=2)), Run("F", Style(bold=True, foreground=1)), Run(" ok", PLAIN)]
    assert end == PLAIN


def test_256_colour_and_rgb_map_to_the_sixteen() -> None:
    runs, _ = decode_line("\x1b[38;5;196mred\x1b[38;2;0;0;250;48;5;2mblue")
    assert runs[0].style.foreground == 9
    assert runs[1].style.foreground == 4 and runs[1].style.background == 2


def test_a_crafted_colour_code_is_dropped_not_a_crash() -> None:
    """A number of 5,000 digits in an SGR escape (int() refuses past 4,300 digits): output is the
    sandbox's to write, and it failed the task and every page showing it."""
    for parameters in ("9" * 5000, "38;2;" + "9" * 5000 + ";0;0", "38;5;" + "1" * 40):
        runs, _ = decode_line(f"\x1b[{parameters}mX\x1b[K ok")
        assert text_of(runs) == "X ok"


def test_carriage_return_progress_keeps_its_last_state() -> None:
    assert text_of(decode_line("10%\r20%\r30%")[0]) == "30%"
    assert text_of(decode_line("Downloading 10%\r\x1b[KDone")[0]) == "Done"
    assert text_of(decode_line("abc\rX")[0]) == "Xbc"  # as a terminal: overwritten, not erased
    assert text_of(decode_line("ab\bc")[0]) == "ac"


def test_every_other_escape_is_dropped() -> None:
    line = "\x1b]8;;http://evil.invalid\x07click\x1b]8;;\x07\x1b]52;c;ZXZpbA==\x07\x1b[2J\x1b[1A\x1b[?25l!\x9b31m"
    assert text_of(decode_line(line)[0]) == "click!"


def test_chunks_join_into_lines_and_styles_carry_across_them() -> None:
    lines = Lines()
    assert lines.feed("\x1b[3") == []  # an escape cut in two waits for its end
    assert lines.feed("2mgreen\nstill") == [[Run("green", Style(foreground=2))]]
    assert lines.feed(" green\x1b[0m\n") == [[Run("still green", Style(foreground=2))]]
    assert lines.feed("no newline") == []
    assert lines.flush() == [[Run("no newline", PLAIN)]]
    assert lines.flush() == []


def test_crlf_line_endings_are_not_carriage_returns() -> None:
    assert Lines().feed("one\r\ntwo\r\n") == [[Run("one", PLAIN)], [Run("two", PLAIN)]]
