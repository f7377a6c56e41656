"""A command's output on the task page: its colours as classes, progress at its last state,
every other escape dropped, and nothing the agent printed read as HTML."""

from __future__ import annotations

from errand.server.eventview import render_event, terminal_html
from errand.tasks.records import Event


def output_event(text: str) -> Event:
    return Event(id=7, task_id="t-1", run_id=None, seq=None, time=0.0, kind="output", data={"text": text})


def test_colours_become_classes_and_other_escapes_go() -> None:
    html = str(terminal_html("\x1b[32m.\x1b[0m\x1b[1;31mF\x1b[0m [100%]\n\x1b]8;;http://evil.invalid\x07x\x1b]8;;\x07"))
    assert html == "<span class='a-f2'>.</span><span class='a-bold a-f1'>F</span> [100%]\nx"


def test_progress_collapses_and_controls_are_shown_not_obeyed() -> None:
    assert str(terminal_html("10%\r\x1b[K100%\n")) == "100%\n"
    assert "\u2407" in str(terminal_html("bell\x07"))  # BEL shown as its picture


def test_the_agents_output_is_never_html() -> None:
    rendered = str(render_event(output_event("\x1b[31m<script>alert(1)</script>\x1b[0m")))
    assert "<script>" not in rendered
    assert "<span class='a-f1'>&lt;script&gt;alert(1)&lt;/script&gt;</span>" in rendered
    assert "\x1b" not in rendered and "␛" not in rendered
