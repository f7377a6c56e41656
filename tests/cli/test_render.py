"""How the task commands render what a task carries, on a terminal: nothing hidden, nothing obeyed."""

from __future__ import annotations

import io

from rich.console import Console

from errand.cli.tasks import print_event, print_patch
from errand.tasks.records import Event


def _terminal(width: int = 60) -> tuple[Console, io.StringIO]:
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, color_system="standard", width=width, highlight=False,
                      emoji=False)  # as errand's own
    return console, buffer


def test_a_diff_line_longer_than_the_terminal_is_wrapped_not_cut() -> None:
    console, buffer = _terminal(width=40)
    print_patch(console, "+x = 1" + " " * 60 + "steal_keys()\n-y = 2\n")
    assert "steal_keys()" in buffer.getvalue()  # Rich's Syntax crops at the edge unless told to wrap
    assert "\x1b[" in buffer.getvalue()  # still coloured


def test_markup_and_emoji_codes_in_an_event_are_printed_as_typed() -> None:
    console, buffer = _terminal(width=200)
    name = "[link=https://e.test/]ok[/link][bold green]ready for review[/] :warning:"
    print_event(console, Event(1, "t-1", "t-1-r1", 1, 0.0, "tool_call", {"name": name, "arguments": {}}))
    printed = buffer.getvalue()
    assert "\x1b]8;" not in printed  # no hyperlink was made
    assert "[link=https://e.test/]ok[/link][bold green]ready for review[/] :warning:" in printed
