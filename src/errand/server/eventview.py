"""A task's events as lines of the web UI's live log (HTML, escaped)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from markupsafe import Markup

from errand._text import printable
from errand.tasks.environment import egress_summary
from errand.tasks.events import OUTPUT_KINDS
from errand.tasks.records import Event

if TYPE_CHECKING:
    from errand.server.taskview import RunNames

__all__ = ["OUTPUT_KINDS", "RENDER", "render_event"]

Render = Callable[[dict[str, Any]], tuple[str, Markup] | None]


def _text(value: object, limit: int = 4000) -> str:
    text = printable(str(value if value is not None else ""))  # agent text: nothing invisible or reordering
    return text if len(text) <= limit else text[:limit - 1] + "…"


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


def _policy(policy: object) -> str:
    return _text(egress_summary(policy))


def _left(data: dict[str, Any]) -> Markup:
    left = list(data.get("left_tracked", []))
    if not left:
        return Markup("")
    return Markup("; changes to tracked files left out: {}").format(_text(", ".join(map(str, left))))


def _plain(label: str, field: str) -> Render:
    return lambda data: (label, Markup("{}").format(_text(data.get(field))))


RENDER: dict[str, Render] = {
    "round_started": lambda d: ("round", Markup("<strong>Round {}</strong> started: {} attempt(s)").format(
        d.get("round"), len(d.get("runs", [])))),
    "environment": lambda d: ("environment", Markup("from {} at {}: egress {}{}, {} sandboxes").format(
        d.get("config") or "the defaults", str(d.get("commit") or "")[:12], _policy(d.get("network")),
        Markup(", setup egress {}").format(_policy(d.get("setup_network"))) if d.get("setup_network") else "",
        d.get("isolation"))),
    "setup_started": lambda d: ("setup", Markup("setting up the environment")),
    "setup_cached": lambda d: ("setup", Markup("environment set up already (cached, <code>{}</code>)").format(
        _text(d.get("key")))),
    "setup_tree": lambda d: ("setup", Markup("setup wrote {} new paths into the tree; every working copy has "
                                             "them, and no diff shows them{}").format(d.get("kept"), _left(d))),
    "setup_finished": lambda d: ("setup", Markup("environment set up and cached")),
    "check_started": lambda d: ("check", Markup("checking the result: {} <code>{}</code>").format(
        d.get("what"), _text(d.get("command")))),
    "model_endpoint": lambda d: ("endpoint", Markup("model {}{}").format(
        _text(d.get("describe")), " (resolved in the worker's environment)" if d.get("resolved_by") == "worker"
        else "")),
    "memory_unavailable": lambda d: ("memory", Markup("project memory unavailable ({}); the round goes on "
                                                      "without it").format(_text(d.get("reason")))),
    "tests_before": lambda d: ("check", Markup("tests on the base: {}{}").format(
        "pass" if d.get("exit_code") == 0 else "fail", " (cached)" if d.get("cached") else "")),
    "model": lambda d: ("model", Markup("{}").format(_text(d.get("content")))) if d.get("content") else None,
    "tool_call": _tool_call,
    "model_retry": lambda d: ("retry", Markup("model call failed ({}); retry {} of {} in {}s").format(
        _text(d.get("reason")), d.get("retry"), d.get("max_retries"), d.get("delay"))),
    "condensed": lambda d: ("condensed", Markup(
        "<details><summary>conversation condensed: {} older steps summarised ({} → {} tokens of a {} window)"
        "</summary><pre>{}</pre></details>").format(d.get("dropped_steps"), d.get("tokens_before"),
                                                   d.get("tokens_after"), d.get("window"), _text(d.get("summary")))),
    "tool_result": _tool_result,
    "question": _plain("question", "text"),
    "answer_sent": _plain("answer", "text"),
    "answer_delivered": lambda d: ("resumed", Markup("answer delivered; the run resumes")),
    "message_sent": _plain("message", "text"),
    "message_delivered": lambda d: ("delivered", Markup("message delivered to the agent")),
    "exit": lambda d: None if d.get("status") == "needs_input" else (
        "ended", Markup("run ended: {} — {}").format(d.get("status"), _text(d.get("detail")))),
    "ranking": lambda d: ("ranking", Markup("attempts ranked: {}").format(", ".join(map(str, d.get("runs", []))))),
    "ready_for_review": lambda d: ("ready", Markup("ready for review (confidence {})").format(d.get("confidence"))),
    "failed": _plain("failed", "reason"),
    "cancelled": lambda d: ("cancelled", Markup("cancelled")),
    "recovered": lambda d: ("recovered", Markup("worker restarted: run {} interrupted, task {}").format(
        d.get("run_id"), d.get("state"))),
    "followup": _plain("follow-up", "text"),
    "followed_up": lambda d: ("follow-up", Markup("continued as a new task <a href='/tasks/{}'>{}</a>: {}").format(
        d.get("task_id"), d.get("task_id"), _text(d.get("text")))),
    "retried": lambda d: ("retried", Markup("retried after it was {}: round {} starts").format(
        _text(d.get("after")), d.get("round"))),
    "rejected": _plain("rejected", "reason"),
    "accepted": lambda d: ("accepted", Markup("accepted as {} on {}").format(
        str(d.get("commit", ""))[:12], d.get("branch"))),
    "credited": lambda d: ("credited", Markup("the commit will credit {} &lt;{}&gt;").format(
        d.get("name"), d.get("email"))),
    "prepared": lambda d: ("prepared", Markup("committed as {} for a draft pull request (not accepted yet)").format(
        str(d.get("commit", ""))[:12])),
}


def render_event(event: Event, names: RunNames | None = None) -> Markup:
    """One ``<li>`` of the log, or nothing for an event the log does not show. Each line
    carries its time and, for a run's lines, the round and attempt (``data-attempt``,
    which the log's filter uses)."""
    data = event.data if isinstance(event.data, dict) else {}
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
            event.id, where, stamp, tag, _text(data.get("text")))
    render = RENDER.get(event.kind)
    shown = render(data) if render is not None else None
    if shown is None:
        return Markup("")
    label, body = shown
    return Markup("<li class='ev ev-{}' id='e{}'{}>{}<span class='tag'>{}{}</span> {}</li>").format(
        event.kind, event.id, where, stamp, label, f" {tag}" if tag else "", body)

