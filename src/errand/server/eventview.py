"""A task's events as lines of the web UI's live log (HTML, escaped)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from markupsafe import Markup

from errand._terminal import Run, decode_line
from errand._text import printable
from errand.tasks.events import OUTPUT_KINDS, data_of, text_of
from errand.tasks.records import Event
from errand.tasks.wording import SENTENCES, Part, Sentence, sentence

if TYPE_CHECKING:
    from errand.server.taskview import RunNames

__all__ = ["OUTPUT_KINDS", "RENDER", "render_event"]

Render = Callable[[dict[str, Any]], tuple[str, Markup] | None]


def _text(value: object, limit: int = 4000) -> str:
    text = printable(str(value if value is not None else ""))  # agent text: nothing invisible or reordering
    return text if len(text) <= limit else text[:limit - 1] + "…"


def terminal_html(text: object, limit: int = 16000) -> Markup:
    """A chunk of a command's output as a terminal shows it: its colours as classes (the page's
    content-security policy allows no inline style), carriage-return progress at its last state,
    every other escape dropped and every control character shown (see :mod:`errand._terminal`)."""
    raw = str(text if text is not None else "")
    raw = raw if len(raw) <= limit else raw[:limit - 1] + "…"
    lines = []
    style = None
    for line in raw.split("\n"):
        runs, style = decode_line(line.removesuffix("\r"), *(() if style is None else (style,)))
        lines.append(Markup("").join(_span(run) for run in runs))
    return Markup("\n").join(lines)


def _span(run: Run) -> Markup:
    style = run.style
    classes = [name for name, on in (("a-bold", style.bold), ("a-dim", style.dim), ("a-italic", style.italic),
                                     ("a-underline", style.underline)) if on]
    classes += [f"a-f{style.foreground}"] if style.foreground is not None else []
    classes += [f"a-b{style.background}"] if style.background is not None else []
    text = printable(run.text, lines=False)
    if not classes:
        return Markup("{}").format(text)
    return Markup("<span class='{}'>{}</span>").format(" ".join(classes), text)


def _tool_call(data: dict[str, Any]) -> tuple[str, Markup] | None:
    arguments = data.get("arguments") or {}
    name = str(data.get("name"))
    if name == "ask_user":
        return None  # the question event says it, once
    if data.get("malformed"):
        return name, Markup("<span class='bad'>refused:</span> {}").format(_text(data.get("malformed")))
    if name == "shell" and isinstance(arguments, dict):
        return name, Markup("<code class='cmd'>$ {}</code>").format(_text(arguments.get("command")))
    if not isinstance(arguments, dict):
        return name, Markup("<code>{}</code>").format(_text(arguments, 200))
    shown = ", ".join(f"{key}={_text(json.dumps(value), 80)}" for key, value in arguments.items())
    return name, Markup("<code>{}</code>").format(shown)


def _tool_result(data: dict[str, Any]) -> tuple[str, Markup] | None:
    ok = bool(data.get("ok"))
    if data.get("name") == "shell" and ok:
        return None  # its output streamed already
    first = (_text(data.get("content"), 400).splitlines() or [""])[0]
    exit_code = data.get("exit_code")
    status = "ok" if ok else (f"exit {exit_code}" if exit_code is not None else "failed")
    return status, Markup("<span class='{}'>{}</span> {}").format("ok" if ok else "bad", status, first)


def _part(part: Part) -> Markup:
    if isinstance(part, str):
        return Markup("{}").format(part)
    text = _text(part.value)
    if part.block:
        return Markup("<pre>{}</pre>").format(text)
    if part.code:
        return Markup("<code>{}</code>").format(text)
    if part.task:
        return Markup("<a href='/tasks/{}'>{}</a>").format(quote(text, safe=""), text)
    return Markup("{}").format(text)


def _html(said: Sentence) -> tuple[str, Markup]:
    body = Markup("").join(_part(part) for part in said.parts)
    return said.label, Markup("<strong>{}</strong> {}").format(said.lead, body) if said.lead else body


def _worded(kind: str) -> Render:
    def render(data: dict[str, Any]) -> tuple[str, Markup] | None:
        said = sentence(kind, data)
        return None if said is None else _html(said)
    return render


def _condensed(data: dict[str, Any]) -> tuple[str, Markup] | None:
    """The shared sentence, with the summary the model was given folded beneath it."""
    worded = _worded("condensed")(data)
    if worded is None:
        return None
    label, body = worded
    return label, Markup("<details><summary>{}</summary><pre>{}</pre></details>").format(
        body, _text(data.get("summary")))


# The shared sentence of errand.tasks.wording for each kind the log shows, except the agent's
# tool calls and results, which the page draws in its own form.
RENDER: dict[str, Render] = {
    **{kind: _worded(kind) for kind in SENTENCES},
    "tool_call": _tool_call,
    "tool_result": _tool_result,
    "condensed": _condensed,
}


def render_event(event: Event, names: RunNames | None = None) -> Markup:
    """One ``<li>`` of the log, or nothing for an event the log does not show. Each line
    carries its time and, for a run's lines, the round and attempt (``data-attempt``,
    which the log's filter uses)."""
    where = Markup("")
    tag = ""
    if names is not None and event.run_id in names.rounds:
        round_, attempt = names.rounds[event.run_id]
        where = Markup(" data-round='{}' data-attempt='{}'").format(round_, attempt)
        tag = names.tag(event.run_id)
    stamp = Markup("<time datetime='{}' data-t='{}'>{}</time>").format(
        time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(event.time)), round(event.time),
        time.strftime("%H:%M:%S", time.gmtime(event.time)))
    if event.kind in OUTPUT_KINDS:
        return Markup("<li class='ev ev-output' id='e{}'{}>{}<span class='tag'>{}</span><pre>{}</pre></li>").format(
            event.id, where, stamp, tag, terminal_html(text_of(event)))
    render = RENDER.get(event.kind)
    shown = render(data_of(event)) if render is not None else None
    if shown is None:
        return Markup("")
    label, body = shown
    return Markup("<li class='ev ev-{}' id='e{}'{}>{}<span class='tag'>{}{}</span> {}</li>").format(
        event.kind, event.id, where, stamp, label, f" {tag}" if tag else "", body)

