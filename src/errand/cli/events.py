"""How the command line shows what a task carries: one line per event of its log, and
:func:`shown` for every value in it, since the agent wrote most of them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.markup import escape

from errand._text import printable
from errand.tasks.environment import egress_summary
from errand.tasks.events import OUTPUT_KINDS
from errand.tasks.records import Event

__all__ = ["EVENT_LINES", "print_event", "shown"]


def shown(value: object, *, lines: bool = True) -> str:
    """``value`` as text a task carries (the agent's, a repository's, a person's), ready to
    interpolate into Rich markup: every control character shown, never obeyed
    (:func:`errand._text.printable`), and ``[...]`` escaped so it is never read as markup.
    ``lines=False`` for a field that must stay on its line (a name, a command, an assumption)."""
    return escape(printable(str(value), lines=lines))


def print_event(out: Console, event: Event, tag: str = "") -> None:
    """One event as a line of the log; ``tag`` (an attempt, ``#2``) starts each of its lines, so
    the output of attempts running side by side can be told apart."""
    line = _event_line(event.kind, event.data if isinstance(event.data, dict) else {})
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


def _one_line(value: object) -> str:
    return shown(value, lines=False)


# One sentence per kind of errand.tasks.events that a person's log shows.
# Every value from an event goes through shown(): the agent wrote most of them, and the rest
# (tool names, statuses) came through its model's replies or the repository.
EVENT_LINES: dict[str, Callable[[dict[str, Any]], str | None]] = {
    "round_started": lambda d: f"[bold]── round {shown(d.get('round'))}[/] ({_one_line(', '.join(d.get('runs', [])))})",
    "environment": lambda d: f"[dim]environment from {_one_line(d.get('config') or 'the defaults')} at "
                             f"{_one_line(str(d.get('commit') or '')[:12])}: egress {_policy(d.get('network'))}"
                             + (f", setup egress {_policy(d.get('setup_network'))}" if d.get("setup_network") else "")
                             + f", {_one_line(d.get('isolation'))} sandboxes[/]",
    "setup_started": lambda d: "[cyan]setting up the environment[/]",
    "setup_cached": lambda d: f"[cyan]environment set up already (cached, {_one_line(d.get('key'))})[/]",
    "setup_tree": lambda d: f"[cyan]setup wrote {d.get('kept')} new paths into the tree; every working "
                            f"copy has them, and no diff shows them[/]" + _left_by_setup(d),
    "setup_finished": lambda d: f"[cyan]environment set up and cached ({_one_line(d.get('key'))})[/]",
    "check_started": lambda d: f"[cyan]checking the result: {_one_line(d.get('what'))}[/] "
                               f"{_one_line(d.get('command'))}",
    "tests_before": lambda d: (f"tests on the base: {'pass' if d.get('exit_code') == 0 else 'fail'}"
                               + (" (cached)" if d.get("cached") else "")),
    "model": lambda d: f"[blue]model:[/] {shown(d.get('content'))}" if d.get("content") else None,
    "tool_call": lambda d: f"[bold]→ {_one_line(d.get('name'))}[/] {_one_line(_arguments(d))}"
    + (f" [yellow](refused: {_one_line(d.get('malformed'))})[/]" if d.get("malformed") else ""),
    "model_retry": lambda d: f"[yellow]model call failed ({_one_line(d.get('reason'))}); retry "
                             f"{_one_line(d.get('retry'))} of {_one_line(d.get('max_retries'))} in "
                             f"{_one_line(d.get('delay'))}s[/]",
    "condensed": lambda d: f"[cyan]conversation condensed: {_one_line(d.get('dropped_steps'))} older steps "
                           f"summarised ({_one_line(d.get('tokens_before'))} → {_one_line(d.get('tokens_after'))} "
                           f"tokens of a {_one_line(d.get('window'))} window)[/]",
    "tool_result": lambda d: _result_line(d),
    "question": lambda d: f"[bold yellow]? {shown(d.get('text'))}[/]",
    "answer_sent": lambda d: f"[yellow]answer:[/] {shown(d.get('text'))}",
    "answer_delivered": lambda d: "[dim]  (answer delivered; the run resumes)[/]",
    "message_sent": lambda d: f"[yellow]message:[/] {shown(d.get('text'))}",
    "message_delivered": lambda d: "[dim]  (message delivered)[/]",
    "exit": lambda d: f"[bold]run ended:[/] {_one_line(d.get('status'))} — {shown(d.get('detail'))}",
    "ranking": lambda d: f"ranking: {_one_line(', '.join(d.get('runs', [])))}",
    "ready_for_review": lambda d: f"[bold green]ready for review[/] (confidence {_one_line(d.get('confidence'))})",
    "failed": lambda d: f"[bold red]failed:[/] {shown(d.get('reason'))}"
    + (f"\n{shown(d.get('log'))}" if d.get("log") else ""),
    "cancelled": lambda d: "[dim]cancelled[/]",
    "model_endpoint": lambda d: _model_endpoint_line(d),
    "memory_unavailable": lambda d: f"[yellow]project memory unavailable ({shown(d.get('reason'))}); the round "
                                    "goes on without it[/]",
    "recovered": lambda d: f"[yellow]worker restarted: run {_one_line(d.get('run_id'))} interrupted, task "
                           f"{_one_line(d.get('state'))}[/]",
    "followup": lambda d: f"[yellow]follow-up:[/] {shown(d.get('text'))}",
    "followed_up": lambda d: f"[yellow]follow-up, as new task {_one_line(d.get('task_id'))}:[/] "
                             f"{shown(d.get('text'))}",
    "retried": lambda d: f"[yellow]retried[/] after it was {_one_line(d.get('after'))}: "
                         f"round {_one_line(d.get('round'))}",
    "rejected": lambda d: f"[red]rejected:[/] {shown(d.get('reason'))}",
    "accepted": lambda d: f"[green]accepted[/] as {_one_line(str(d.get('commit', ''))[:12])} on "
                          f"{_one_line(d.get('branch'))}",
    "credited": lambda d: f"the commit will credit {_one_line(d.get('name'))} <{_one_line(d.get('email'))}>",
    "prepared": lambda d: f"committed as {_one_line(str(d.get('commit', ''))[:12])} for a draft pull request "
                          f"(not accepted yet)",
    "output": lambda d: shown(d.get("text", "")),
    "setup_output": lambda d: shown(d.get("text", "")),
    "check_output": lambda d: shown(d.get("text", "")),
}


def _policy(policy: object) -> str:
    return _one_line(egress_summary(policy))


def _left_by_setup(data: dict[str, Any]) -> str:
    left = list(data.get("left_tracked", []))
    if not left:
        return ""
    return (f"\n[yellow]setup also changed or deleted files git tracks; that was left out of the working "
            f"copy: {_one_line(', '.join(map(str, left)))}[/]")


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


def _model_endpoint_line(data: dict[str, Any]) -> str:
    line = f"[dim]model {shown(data.get('describe'), lines=False)}"
    if data.get("resolved_by") == "worker":
        line += " (the task recorded no endpoint; resolved in the worker's environment)"
    line += "[/]"
    if data.get("key") == "differs":
        variable = (data.get("model") or {}).get("api_key_env")
        line += (f"\n[yellow]warning: the worker's ${shown(variable, lines=False)} is not the key the task was "
                 "submitted with; it uses its own[/]")
    return line
