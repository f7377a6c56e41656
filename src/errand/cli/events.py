"""How the command line shows what a task carries: one line per event of its log, and
:func:`shown` for every value in it, since the agent wrote most of them.

A command's output arrives in chunks that may end mid-line and, in a best-of-N round,
interleave with other attempts'. :class:`LogPrinter` joins each run's stream into whole
lines (:class:`errand._terminal.Lines`), draws their colours and drops every other escape,
and starts each line with the attempt's tag, so nothing swallows the line after it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.color import Color
from rich.console import Console
from rich.markup import escape
from rich.style import Style as RichStyle
from rich.text import Text

from errand._terminal import Lines, Run, Style
from errand._text import printable
from errand.tasks.events import OUTPUT_KINDS, data_of, text_of
from errand.tasks.records import Event
from errand.tasks.wording import SENTENCES, Part, Sentence, Tone, sentence

__all__ = ["EVENT_LINES", "LogPrinter", "print_event", "shown"]


def shown(value: object, *, lines: bool = True) -> str:
    """``value`` as text a task carries (the agent's, a repository's, a person's), ready to
    interpolate into Rich markup: every control character shown, never obeyed
    (:func:`errand._text.printable`), and ``[...]`` escaped so it is never read as markup.
    ``lines=False`` for a field that must stay on its line (a name, a command, an assumption)."""
    return escape(printable(str(value), lines=lines))


def print_event(out: Console, event: Event, tag: str = "") -> None:
    """One event as a line of the log; ``tag`` (an attempt, ``#2``) starts each of its lines, so
    the output of attempts running side by side can be told apart."""
    line = _event_line(event.kind, data_of(event))
    if line is None:
        return
    if tag:
        prefix = f"[magenta]{tag}[/] "
        body, newline = (line[:-1], "\n") if line.endswith("\n") else (line, "")
        line = prefix + body.replace("\n", "\n" + prefix) + newline
    if event.kind in OUTPUT_KINDS:
        out.print(line, end="", style="dim")
    else:
        out.print(line)


class LogPrinter:
    """A task's events on ``out``: output as whole lines per run and stream, other events as
    :func:`print_event` does. ``tag_of`` names an event's attempt (``#2``) or gives ``""``;
    call :meth:`close` at the end, which prints any line still unfinished."""

    def __init__(self, out: Console, tag_of: Callable[[Event], str] | None = None) -> None:
        self.out = out
        self.tag_of = tag_of or (lambda event: "")
        self._streams: dict[tuple[str | None, str], tuple[Lines, str]] = {}

    def show(self, event: Event) -> None:
        tag = self.tag_of(event)
        if event.kind in OUTPUT_KINDS:
            lines, _ = self._streams.get((event.run_id, event.kind)) or (Lines(), tag)
            self._streams[(event.run_id, event.kind)] = (lines, tag)
            self._print(lines.feed(text_of(event)), tag)
            return
        self._flush(lambda key: key[0] == event.run_id)  # its run's unfinished output ends before it
        print_event(self.out, event, tag)

    def close(self) -> None:
        self._flush(lambda key: True)

    def _flush(self, which: Callable[[tuple[str | None, str]], bool]) -> None:
        for key in [key for key in self._streams if which(key)]:
            lines, tag = self._streams.pop(key)
            self._print(lines.flush(), tag)

    def _print(self, lines: list[list[Run]], tag: str) -> None:
        for runs in lines:
            self.out.print(terminal_line(runs, tag), soft_wrap=True, highlight=False)


def terminal_line(runs: list[Run], tag: str = "") -> Text:
    """One decoded line of output as Rich draws it: its colours, every control character shown."""
    line = Text(end="")
    if tag:
        line.append(f"{tag} ", style="magenta")
    for run in runs:
        line.append(printable(run.text, lines=False), style=_rich_style(run.style))
    return line


def _rich_style(style: Style) -> RichStyle:
    plain = style.foreground is None and style.background is None and not (style.bold or style.underline)
    return RichStyle(color=None if style.foreground is None else Color.from_ansi(style.foreground),
                     bgcolor=None if style.background is None else Color.from_ansi(style.background),
                     bold=style.bold or None, dim=style.dim or plain or None, italic=style.italic or None,
                     underline=style.underline or None)


def _one_line(value: object) -> str:
    return shown(value, lines=False)


# Each tone of errand.tasks.wording as Rich styles it; a sentence's lead takes the style, and
# a sentence without a lead is styled whole (a question, a step of the setup).
_TONE: dict[Tone, str] = {"plain": "", "heading": "bold", "quiet": "dim", "step": "cyan", "note": "yellow",
                          "warn": "yellow", "good": "green", "bad": "bold red", "ask": "bold yellow"}


def _part(part: Part) -> str:
    if isinstance(part, str):
        return escape(part)
    if part.block:
        return "\n" + shown(part.value)
    return shown("" if part.value is None else part.value, lines=part.lines)


def _line(said: Sentence) -> str:
    body = "".join(_part(part) for part in said.parts)
    style = _TONE[said.tone]
    mark = {"heading": "── ", "ask": "? "}.get(said.tone, "") if not said.lead else ""
    if said.lead:
        return (f"[{style}]{escape(said.lead)}[/] " if style else f"{escape(said.lead)} ") + body
    return f"[{style}]{mark}{body}[/]" if style else mark + body


def _worded(kind: str) -> Callable[[dict[str, Any]], str | None]:
    def line(data: dict[str, Any]) -> str | None:
        said = sentence(kind, data)
        return None if said is None else _line(said)
    return line


# One line per kind of errand.tasks.events that a person's log shows: the shared sentence of
# errand.tasks.wording, except the agent's tool calls and results and the streamed output,
# which a terminal shows in its own form. Every value goes through shown(): the agent wrote
# most of them, and the rest (tool names, statuses) came through its model's replies.
EVENT_LINES: dict[str, Callable[[dict[str, Any]], str | None]] = {
    **{kind: _worded(kind) for kind in SENTENCES},
    "tool_call": lambda d: f"[bold]→ {_one_line(d.get('name'))}[/] {_one_line(_arguments(d))}"
    + (f" [yellow](refused: {_one_line(d.get('malformed'))})[/]" if d.get("malformed") else ""),
    "tool_result": lambda d: _result_line(d),
    "output": lambda d: shown(d.get("text", "")),
    "setup_output": lambda d: shown(d.get("text", "")),
    "check_output": lambda d: shown(d.get("text", "")),
}


def _result_line(data: dict[str, Any]) -> str | None:
    if data.get("name") == "shell" and data.get("ok"):
        return None  # its output was streamed already
    first = (str(data.get("content") or "").split("\n") or [""])[0][:200]
    return f"  [{'green' if data.get('ok') else 'red'}]← {_one_line(first)}[/]"


def _event_line(kind: str, data: dict[str, Any]) -> str | None:
    render = EVENT_LINES.get(kind)
    return render(data) if render is not None else None


def _arguments(data: dict[str, Any]) -> str:
    arguments = data.get("arguments") or {}
    if data.get("name") == "shell":
        return str(arguments.get("command", ""))
    brief = {k: (v if len(str(v)) < 60 else str(v)[:57] + "…") for k, v in arguments.items()}
    return " ".join(f"{k}={v!r}" for k, v in brief.items())
