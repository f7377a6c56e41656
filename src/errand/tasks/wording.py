"""What each event of a task's log says, in words, written once.

The command line (:mod:`errand.cli.events`) and the web log
(:mod:`errand.server.eventview`) both show these sentences; each face only styles
them. A sentence is literal words (errand's) and :class:`Value` parts, which come
from the event's data: the agent, its model, the repository or a person wrote most of
them, so each face shows a value cleaned of control characters and escaped for its
own markup, never interpreted. The agent's tool calls and results, and streamed
output, are shown by each face in its own form (a command line, a collapsible
block); they carry no sentence here.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["SENTENCES", "Sentence", "Tone", "Value", "egress_summary", "sentence"]

Tone = Literal["plain", "heading", "quiet", "step", "note", "warn", "good", "bad", "ask"]


@dataclass(frozen=True)
class Value:
    """A value from the event's data, kept on its line (a line break in it is shown, not
    obeyed) unless ``lines`` (free text: a question, a reason, the model's words) or
    ``block`` (a log, on lines of its own). ``code``: shown as code (a command, a cache
    key); ``task``: a task's id, which a face may link to."""

    value: object
    lines: bool = False
    block: bool = False
    code: bool = False
    task: bool = False


Part = str | Value


@dataclass(frozen=True)
class Sentence:
    """One line of the log: ``label`` names the kind in a word (the web log's tag), ``lead``
    is said first in the tone's emphasis (``question:``, ``failed:``), then ``parts``."""

    label: str
    parts: tuple[Part, ...]
    tone: Tone = "plain"
    lead: str = ""


Say = Callable[[Mapping[str, Any]], Sentence | None]


def sentence(kind: str, data: Mapping[str, Any]) -> Sentence | None:
    """What the log says of an event of ``kind``; None for a kind (or an event) it does not show."""
    say = SENTENCES.get(kind)
    return say(data) if say is not None else None


def _said(label: str, *parts: Part, tone: Tone = "plain", lead: str = "") -> Sentence:
    return Sentence(label, tuple(part for part in parts if part != ""), tone, lead)


def _text(label: str, field: str, lead: str, tone: Tone = "note") -> Say:
    """A kind that carries a person's or the agent's text: ``lead`` then the text."""
    return lambda d: _said(label, Value(d.get(field), lines=True), tone=tone, lead=lead)


def _policy(policy: object) -> Value:
    return Value(egress_summary(policy))


def egress_summary(policy: object) -> str:
    """A policy as events carry it (``Network.to_dict()``), in a few words: ``none``, ``open``,
    or ``only`` and what it allows. Plain text: each face escapes it its own way."""
    if not isinstance(policy, Mapping):
        return "none"
    if policy.get("mode") != "allow":
        return str(policy.get("mode") or "none")
    return "only " + ", ".join(map(str, [*policy.get("domains", []), *policy.get("cidrs", [])]))


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _round_started(d: Mapping[str, Any]) -> Sentence:
    runs = [str(run) for run in d.get("runs", [])]
    return _said("round", "round ", Value(d.get("round")), f" started: {_count(len(runs), 'attempt')} (",
                 Value(", ".join(runs)), ")", tone="heading")


def _environment(d: Mapping[str, Any]) -> Sentence:
    setup = (", setup egress ", _policy(d.get("setup_network"))) if d.get("setup_network") else ()
    detected = ("; no errand.toml, so detected: ", Value(d.get("detected")),
                " (`errand init` writes it down to edit)") if d.get("detected") else ()
    return _said("environment", "environment from ", Value(d.get("config") or ("its files" if detected
                                                                                 else "the defaults")),
                 " at ", Value(str(d.get("commit") or "")[:12]), ": egress ", _policy(d.get("network")), *setup,
                 ", ", Value(d.get("isolation")), " sandboxes", *detected, tone="quiet")


def _setup_tree(d: Mapping[str, Any]) -> Sentence:
    left = [str(path) for path in d.get("left_tracked", [])]
    tail = ("; setup also changed or deleted files git tracks, left out of the working copy: ",
            Value(", ".join(left))) if left else ()
    return _said("setup", "setup wrote ", Value(d.get("kept")), " new paths into the tree; every working copy has "
                 "them, and no diff shows them", *tail, tone="step")


def _setup_finished(d: Mapping[str, Any]) -> Sentence:
    failed = (", but its refresh ", Value(d.get("refresh_failed"), code=True), " failed") \
        if d.get("refresh_failed") else ()
    what = "environment refreshed and cached (" if d.get("reused") else "environment set up and cached ("
    return _said("setup", what, Value(d.get("key"), code=True), ")", *failed,
                 tone="warn" if failed else "step")


def _model_endpoint(d: Mapping[str, Any]) -> Sentence:
    parts: list[Part] = ["model ", Value(d.get("describe"))]
    if d.get("resolved_by") == "worker":
        parts.append(" (the task recorded no endpoint; resolved in the worker's environment)")
    if d.get("key") == "differs":
        variable = (d.get("model") or {}).get("api_key_env")
        parts += ["; warning: the worker's $", Value(variable), " is not the key the task was submitted with; "
                  "it uses its own"]
    return _said("endpoint", *parts, tone="warn" if d.get("key") == "differs" else "quiet")


def _egress(d: Mapping[str, Any]) -> Sentence:
    """Where a sandbox connected (per host, with bytes), then each refusal with its reason."""
    hosts = [h for h in d.get("hosts") or [] if isinstance(h, Mapping)] if isinstance(d.get("hosts"), list) else []
    refused = [r for r in d.get("refused") or [] if isinstance(r, Mapping)] \
        if isinstance(d.get("refused"), list) else []
    more_hosts, more_refused = _number(d.get("more_hosts")), _number(d.get("more_refused"))
    reached = "; ".join(f"{h.get('host')}:{h.get('port')} ×{h.get('connections')}, "
                        f"{_size(h.get('bytes_out'))} out, {_size(h.get('bytes_in'))} in" for h in hosts)
    last = [r for r in d.get("last_refused") or [] if isinstance(r, Mapping)] \
        if isinstance(d.get("last_refused"), list) else []
    lines = _refused_lines(refused)
    if more_refused:
        lines.append(f"… and {more_refused} more refused" + (f", the last {len(last)} of them:" if last else ""))
        lines += _refused_lines(last)
    parts: list[Part] = ["egress of the ", Value(d.get("role")), " sandbox: ",
                         _count(sum(_number(h.get("connections")) for h in hosts), "connection"), " to ",
                         _count(len(hosts) + more_hosts, "host"), *((" (", Value(reached), ")") if reached else ()),
                         f", {_count(len(refused) + more_refused, 'refusal')}"]
    if lines:
        parts.append(Value("\n".join(lines), block=True))
    return _said("egress", *parts, tone="warn" if lines else "quiet")


def _secrets(d: Mapping[str, Any]) -> Sentence:
    """Which declared secrets the role's sandboxes get, and each one left out with its reason."""
    given = [g for g in d.get("given") or [] if isinstance(g, Mapping)] if isinstance(d.get("given"), list) else []
    withheld = [w for w in d.get("withheld") or [] if isinstance(w, Mapping)] \
        if isinstance(d.get("withheld"), list) else []
    names = ", ".join(f"{g.get('name')} (for {', '.join(map(str, g.get('hosts') or []))})" for g in given)
    lines = "\n".join(f"{w.get('name')} left out: {w.get('reason')}" for w in withheld)
    return _said("secrets", "secrets of the ", Value(d.get("role")), " sandboxes: ",
                 Value(names) if names else "none given", *((Value(lines, block=True),) if lines else ()),
                 tone="warn" if lines else "quiet")


def _refused_lines(refusals: list[Mapping[str, Any]]) -> list[str]:
    """A line per refusal; the same host, port and reason again and again (an installer retrying)
    one line, with how many times and from when to when."""
    same: dict[tuple[str, str, str], list[float | None]] = {}
    for refusal in refusals:
        same.setdefault((str(refusal.get("host")), str(refusal.get("port")), str(refusal.get("reason"))),
                        []).append(_seconds(refusal.get("time")))
    lines = []
    for (host, port, reason), times in same.items():
        known = [t for t in times if t is not None]
        first, last = (_clock(min(known)), _clock(max(known))) if known else ("--:--:--", "--:--:--")
        when = first if len(times) == 1 else f"{first}{'' if first == last else '–' + last} ×{len(times)}"
        lines.append(f"refused {when} {host}:{port}: {reason}")
    return lines


def _seconds(value: object) -> float | None:
    """A time in seconds as events carry it; None for what is none (inf, NaN, text: forged data)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        seconds = float(value)
    except OverflowError:  # an int of 400 digits
        return None
    return seconds if math.isfinite(seconds) else None


def _clock(seconds: float) -> str:
    """``HH:MM:SS`` (UTC) of a time in seconds; ``--:--:--`` for one no clock shows (forged data)."""
    try:
        return time.strftime("%H:%M:%S", time.gmtime(seconds))
    except (OverflowError, OSError, ValueError):
        return "--:--:--"


def _number(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    if isinstance(value, float):
        return int(value) if math.isfinite(value) else 0
    return value if abs(value) < 1 << 63 else 0  # JSON reads 400 digits as an int: no count is that


def _size(value: object) -> str:
    size = float(_number(value))
    for unit in ("B", "kB", "MB"):
        if size < 1000:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} GB"


def _failed(d: Mapping[str, Any]) -> Sentence:
    log = (Value(d.get("log"), block=True),) if d.get("log") else ()
    return _said("failed", Value(d.get("reason"), lines=True), *log, tone="bad", lead="failed:")


def _recovered(d: Mapping[str, Any]) -> Sentence:
    """A run ended for its worker or workflow, or a task requeued: the reason if one was given."""
    run = ("run ", Value(d.get("run_id")), " ended, ") if d.get("run_id") else ()
    why = (": ", Value(d.get("reason"), lines=True)) if d.get("reason") else (" (its worker was gone)",)
    return _said("recovered", *run, "task ", Value(d.get("state")), *why, tone="warn")


def _memories_exported(d: Mapping[str, Any]) -> Sentence:
    count = len(d.get("ids", []))
    return _said("memory", f"{count} approved {'memory' if count == 1 else 'memories'} written into ",
                 Value(d.get("file"), code=True), " by errand memory export (no model)", tone="step")


SENTENCES: Mapping[str, Say] = {
    "round_started": _round_started,
    "environment": _environment,
    "setup_started": lambda d: _said("setup", "refreshing the environment of ", Value(d.get("reused"), code=True),
                                     " for this commit", tone="step") if d.get("reused")
    else _said("setup", "setting up the environment", tone="step"),
    "setup_cached": lambda d: _said("setup", "environment set up already (cached, ", Value(d.get("key"), code=True),
                                    ")", tone="step"),
    "setup_tree": _setup_tree,
    "egress": _egress,
    "secrets": _secrets,
    "setup_finished": _setup_finished,
    "check_skipped": lambda d: _said("check", "not run again: ", Value(d.get("what")), " (", Value(d.get("reason")),
                                     ")", tone="quiet"),
    "check_started": lambda d: _said("check", "checking the result: ", Value(d.get("what")), " ",
                                     Value(d.get("command"), code=True), tone="step"),
    "tests_before": lambda d: _said("check", "tests on the base: ", "pass" if d.get("exit_code") == 0 else "fail",
                                    " (cached)" if d.get("cached") else ""),
    "model": lambda d: _said("model", Value(d.get("content"), lines=True), lead="model:") if d.get("content")
    else None,
    "model_retry": lambda d: _said("retry", "model call failed (", Value(d.get("reason")), "); retry ",
                                   Value(d.get("retry")), " of ", Value(d.get("max_retries")), " in ",
                                   Value(d.get("delay")), "s", tone="warn"),
    "condensed": lambda d: _said("condensed", "conversation condensed: ", Value(d.get("dropped_steps")),
                                 " older steps summarised (", Value(d.get("tokens_before")), " → ",
                                 Value(d.get("tokens_after")), " tokens of a ", Value(d.get("window")), " window)",
                                 tone="step"),
    "question": _text("question", "text", "", tone="ask"),
    "answer_sent": _text("answer", "text", "answer:"),
    "answer_delivered": lambda d: _said("resumed", "answer delivered; the run resumes", tone="quiet"),
    "message_sent": _text("message", "text", "message:"),
    "message_delivered": lambda d: _said("delivered", "message delivered to the agent", tone="quiet"),
    "exit": lambda d: None if d.get("status") == "needs_input" else _said(
        "ended", Value(d.get("status")), " — ", Value(d.get("detail"), lines=True), tone="heading",
        lead="run ended:"),
    "ranking": lambda d: _said("ranking", "attempts ranked: ", Value(", ".join(map(str, d.get("runs", []))))),
    "ready_for_review": lambda d: _said("ready", "ready for review (confidence ", Value(d.get("confidence")), ")",
                                        tone="good"),
    "answered": lambda d: _said("answered", Value(d.get("report"), lines=True), tone="good",
                                lead="answered (no change):"),
    "failed": _failed,
    "cancelled": lambda d: _said("cancelled", "cancelled", tone="quiet"),
    "memories_exported": _memories_exported,
    "distill_skipped": lambda d: _said("memory", Value(d.get("reason"), lines=True), tone="warn"),
    "memory_unavailable": lambda d: _said("memory", "project memory unavailable (", Value(d.get("reason")),
                                          "); the round goes on without it", tone="warn"),
    "recovered": _recovered,
    "model_endpoint": _model_endpoint,
    "followup": _text("follow-up", "text", "follow-up:"),
    "followed_up": lambda d: _said("follow-up", Value(d.get("task_id"), task=True), ": ",
                                   Value(d.get("text"), lines=True), tone="note", lead="follow-up, as new task"),
    "retried": lambda d: _said("retried", "retried after it was ", Value(d.get("after")), ": round ",
                               Value(d.get("round")), " starts", tone="note"),
    "rejected": _text("rejected", "reason", "rejected:", tone="bad"),
    "accepted": lambda d: _said("accepted", "accepted as ", Value(str(d.get("commit", ""))[:12], code=True), " on ",
                                Value(d.get("branch"), code=True), tone="good"),
    "credited": lambda d: _said("credited", "the commit will credit ", Value(d.get("name")), " <",
                                Value(d.get("email")), ">", tone="quiet"),
    "prepared": lambda d: _said("prepared", "committed as ", Value(str(d.get("commit", ""))[:12], code=True),
                                " for a draft pull request (not accepted yet)", tone="note"),
}
