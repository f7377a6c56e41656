"""The log's vocabulary is declared once: both renderers speak exactly the declared kinds."""

from __future__ import annotations

from errand.cli.events import EVENT_LINES
from errand.server.eventview import RENDER
from errand.tasks.events import KINDS, OUTPUT_KINDS

SHOWN = {name for name, kind in KINDS.items() if kind.shown and not kind.output}


def test_the_command_line_renders_every_shown_kind_and_no_other() -> None:
    assert set(EVENT_LINES) - OUTPUT_KINDS == SHOWN


def test_the_web_log_renders_every_shown_kind_and_no_other() -> None:
    assert set(RENDER) == SHOWN
