"""The task commands of errand's command line: intake, watching, steering and review.

They call :class:`~errand.tasks.service.TaskService` on the local store, the same
service the HTTP API calls. ``errand run`` starts a background worker when none
is running, so a person hands the task over and goes on working.

With ``--server URL`` (or ``ERRAND_SERVER``) they call an ``errand serve``
instead, through :class:`~errand.server.client.ErrandClient`, which has the
service's methods; the server's engine runs the tasks.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from errand import _settings
from errand._figures import duration as figures_duration
from errand._figures import money, tokens
from errand._text import printable
from errand.cli.confirm import Yes, confirm
from errand.cli.events import LogPrinter, print_event, shown
from errand.database import store_retry_from_environment
from errand.errors import ConfigError, ErrandError
from errand.forge.refs import looks_like_issue_ref
from errand.models import ModelEndpoint
from errand.repo.git import run_git
from errand.repo.workcopy import is_url, source_name
from errand.tasks.api import TaskApi
from errand.tasks.comments import LineComment, Side
from errand.tasks.engines.workers import notes, running_worker, worker_notes
from errand.tasks.errors import NeedsConfirmation
from errand.tasks.events import Answered, Failed, FollowupSaid, MemoriesGiven, text_of
from errand.tasks.evidence import Evidence, TestRun
from errand.tasks.lifecycle import FINAL, TaskState
from errand.tasks.records import Event, Run, Task
from errand.tasks.round.defaults import CONFIG_FILE
from errand.tasks.service import TaskService, issue_instruction
from errand.tasks.store.tasks import TaskStore

__all__ = ["age", "console", "print_event", "print_evidence", "print_patch", "register", "shown", "task_service"]

EXIT_ERROR = 1
EXIT_USAGE = 2
_NAMED = 5  # uncommitted files named by `errand run`; the rest are counted
_SETTLED = {TaskState.READY_FOR_REVIEW, TaskState.ACCEPTED, TaskState.REJECTED, TaskState.ANSWERED, TaskState.FAILED,
            TaskState.CANCELLED}
_TITLE_WIDTH, _REPO_WIDTH = 12, 16  # `errand ls`: the least a title gets, the most a repository's name does
_STATE_STYLE = {"queued": "cyan", "preparing": "cyan", "running": "blue", "needs_input": "bold yellow",
                "ready_for_review": "bold green", "accepted": "green", "rejected": "red", "answered": "green",
                "failed": "bold red", "cancelled": "dim"}


def console(*, stderr: bool = False) -> Console:
    # No emoji codes: ``:warning:`` in an agent's text must print as typed, not as a picture.
    return Console(highlight=False, emoji=False, stderr=stderr)


Server = Annotated[str | None, typer.Option(
    "--server", envvar="ERRAND_SERVER", metavar="URL", help="Use an errand server instead of the local store.")]
Token = Annotated[str | None, typer.Option("--token", envvar="ERRAND_TOKEN", metavar="TOKEN",
                                          help="The server's token.")]
StartWorker = Annotated[bool, typer.Option("--worker/--no-worker", help="Start a background worker if none runs.")]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON (the HTTP API's fields) instead of text.")]


@contextmanager
def task_service(server: str | None = None, token: str | None = None, *, patient: bool = False) -> Iterator[TaskApi]:
    """The local store, or the server at ``server``, with errand's errors turned into one red
    line and an exit code. ``patient``: a store that does not answer yet is tried again for
    ``ERRAND_STORE_RETRY_SECONDS``, each try said on stderr (a long-running process started while
    its database restarts)."""
    try:
        if server:
            from errand.server.client import ErrandClient  # httpx only when a server is named

            with ErrandClient(server, token=token) as client:
                yield client
        else:
            with TaskStore.open(patience=store_retry_from_environment() if patient else 0.0) as store:
                yield TaskService(store)
    except ErrandError as error:
        Console(stderr=True).print(f"error: {printable(error.message)}", style="red", markup=False,
                                   highlight=False, soft_wrap=True)
        raise typer.Exit(EXIT_USAGE if isinstance(error, ConfigError) else EXIT_ERROR) from None


TaskId = Annotated[str, typer.Argument(metavar="ID", help="The task's id (see `errand ls`).")]


def register(app: typer.Typer) -> None:
    for command in (run, ls, show, diff, logs, accept, reject, followup, retry, answer, message, cancel):
        app.command(command.__name__.rstrip("_"))(command)


# ------------------------------------------------------------------ intake


def run(
    instruction: Annotated[str | None, typer.Argument(metavar="INSTRUCTION", help="What the agent should do.")] = None,
    repo: Annotated[str, typer.Option("--repo", metavar="PATH", help="A local git repository or a git URL.")] = ".",
    base: Annotated[str, typer.Option("--base", metavar="REF", help="The ref the work starts from.")] = "HEAD",
    model: Annotated[str | None, typer.Option(
        "--model", metavar="MODEL", help="A [models.NAME] from $ERRAND_HOME/config.toml, or provider:model "
                                         "(default: $ERRAND_MODEL, then the file's model).")] = None,
    attempts: Annotated[int, typer.Option(
        "--attempts", metavar="N", help="Attempts run in parallel, ranked by evidence.")] = 1,
    agent: Annotated[str | None, typer.Option(
        "--agent", metavar="KIND", help="errand (its own loop) or an agent CLI run in the sandbox: claude-code, "
                                        "codex, gemini-cli, opencode, mini-swe-agent or aider (default: errand.toml's "
                                        "[agent] kind, then config.toml's).")] = None,
    issue: Annotated[str | None, typer.Option(
        "--issue", metavar="FILE|OWNER/NAME#N|URL", help="Take the task from an issue: a Markdown file, or an "
                                                         "issue on GitHub, Gitea or GitLab (its thread read in "
                                                         "full).")] = None,
    issues: Annotated[str | None, typer.Option(
        "--issues", metavar="QUERY", help="One task per issue a GitHub search finds (\"label:bug is:open\"; "
                                          "repo:OWNER/NAME, or the repository forge.toml gives --repo).")] = None,
    limit: Annotated[int, typer.Option("--limit", metavar="N", min=1, max=100, help="At most N issues.")] = 20,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Stream the task's log until it settles.")] = False,
    start_worker: StartWorker = True,
    as_json: Annotated[bool, typer.Option("--json", help="Print the task as JSON (the HTTP API's fields); with "
                                                          "-f, once it settles (the log goes to stderr).")] = False,
    server: Server = None,
    token: Token = None,
) -> None:
    """Hand a task to an agent; it runs in the background and comes back as a diff to review."""
    with task_service(server, token) as service:
        title = None
        if issues is not None:
            from errand.cli.forge import run_batch

            run_batch(service, issues, clone=repo, limit=limit, base=base, model=model, attempts=attempts)
            if start_worker and not server:
                _ensure_worker(console())
            return
        if issue is not None and instruction is not None:
            raise ConfigError("give an instruction or --issue FILE, not both", code="invalid_input")
        if issue is not None and not Path(issue).exists() and looks_like_issue_ref(issue):
            from errand.cli.forge import submit_forge_issue  # githubkit only when a forge issue is named

            task = submit_forge_issue(service, issue, repo=repo, base=base, model=model, attempts=attempts)
        else:
            if issue is not None:
                title, instruction = issue_instruction(Path(issue))
            task = service.submit(instruction or "", repo=repo, base=base, model=model, attempts=attempts,
                                  title=title, agent=agent)
        # With --json, stdout carries the one JSON object and everything said on the way goes to stderr.
        out = console(stderr=as_json)
        if not as_json:
            out.print(f"[bold]{task.id}[/] queued: {shown(task.title, lines=False)}")
        _say_left_out(task)
        if start_worker and not server:
            _ensure_worker(out, task.model_endpoint)
        if follow:
            _follow(service, task.id, out)
            task = service.get_task(task.id)
        elif not as_json:
            out.print(f"[dim]follow it with `errand logs -f {task.id}`; review with `errand show {task.id}`[/]")
        if as_json:
            _print_json(_record_json(task))


def _say_left_out(task: Task) -> None:
    """Name the uncommitted files a task started from the checkout's HEAD does not have: it
    takes code and errand.toml from the commit, and an edit not yet committed is easy to forget."""
    left = uncommitted(Path(task.repo)) if not is_url(task.repo) and Path(task.repo).is_dir() else []
    head = run_git(["rev-parse", "--verify", "--quiet", "HEAD"], Path(task.repo), check=False).strip() if left else ""
    if not left or head != task.base_commit:
        return
    named = ", ".join(left[:_NAMED]) + (f" and {len(left) - _NAMED} more" if len(left) > _NAMED else "")
    config = f" (the committed {CONFIG_FILE} is the one it uses)" if CONFIG_FILE in left else ""
    Console(stderr=True).print(
        f"note: {len(left)} uncommitted file(s) left out{config}: the task starts from commit "
        f"{(task.base_commit or '')[:12]}, not your working tree: {named}. Commit them and run again to include "
        "them.", style="yellow", markup=False, highlight=False, soft_wrap=True)


def uncommitted(repo: Path) -> list[str]:
    """The paths ``git status`` reports changed, staged or untracked (not ignored) in ``repo``."""
    entries = iter(run_git(["status", "--porcelain=v1", "-z", "--untracked-files=all"], repo, check=False)
                   .split("\0"))
    paths = []
    for entry in entries:
        if len(entry) > 3:
            paths.append(printable(entry[3:], lines=False))
            if entry[0] in "RC":
                next(entries, None)  # a rename's or copy's source path follows as its own field
    return paths


def _ensure_worker(out: Console, endpoint: ModelEndpoint | None = None) -> None:
    """Start ``errand worker`` in the background unless one holds this errand home's lock; if
    one does, say where its environment differs from this one for ``endpoint``."""
    info = running_worker()
    if info is not None:
        said = worker_notes(info, os.environ) + (notes(endpoint, info, os.environ) if endpoint is not None else [])
        for note in said:
            Console(stderr=True).print(f"warning: {note}", style="yellow", markup=False, highlight=False,
                                       soft_wrap=True)
        return
    log_path = _settings.home() / "worker.log"
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "errand", "worker", "--exit-when-idle", "600"], stdin=subprocess.DEVNULL,
            stdout=log, stderr=log, start_new_session=True, close_fds=True)
    out.print(f"[dim]started a background worker (pid {process.pid}, log {shown(log_path)})[/]")


# ------------------------------------------------------------------ reading


def ls(
    state: Annotated[str | None, typer.Option("--state", metavar="STATE", help="Only tasks in this state.")] = None,
    repo: Annotated[str | None, typer.Option("--repo", metavar="PATH", help="Only tasks of this repository.")] = None,
    limit: Annotated[int, typer.Option("--limit", metavar="N", min=1, help="How many, newest first.")] = 20,
    as_json: AsJson = False,
    server: Server = None,
    token: Token = None,
) -> None:
    """List tasks, newest first."""
    with task_service(server, token) as service:
        if state is not None and state not in TaskState.__members__.values():
            raise ConfigError(f"unknown state {state!r}; states are {', '.join(TaskState)}", code="invalid_state")
        tasks = service.list_tasks(state=state, repo=None if repo is None else source_name(repo), limit=limit)
        if as_json:
            _print_json([_record_json(t) for t in tasks])
            return
        # One line a task at any width: the title takes what is left and ends in "…" when cut, the
        # repository shows its name (`errand show` and --json have the whole path).
        rows = [(shown(task.id), _state(task.state), age(time.time() - task.created_at), str(task.attempts),
                 shown(task.title, lines=False), shown(_repo_name(task.repo), lines=False)) for task in tasks]
        out = console()
        widths = [max([len(name), *(len(Text.from_markup(row[column])) for row in rows)])
                  for column, name in enumerate(("ID", "STATE", "AGE", "ATTEMPTS", "TITLE", "REPO"))]
        widths[5] = min(widths[5], _REPO_WIDTH)
        widths[4] = max(_TITLE_WIDTH, min(widths[4], out.width - sum(widths[:4]) - widths[5] - 2 * 5))
        table = Table(box=None, pad_edge=False)
        for name, width in zip(("ID", "STATE", "AGE", "ATTEMPTS", "TITLE", "REPO"), widths, strict=True):
            table.add_column(name, no_wrap=True, overflow="ellipsis", width=width)
        for row in rows:
            table.add_row(*row)
        out.print(table)


def _repo_name(repo: str) -> str:
    """A repository's last path part: ``/home/me/src/calc`` → ``calc``, ``https://host/o/calc.git`` → ``calc``."""
    return repo.rstrip("/").rsplit("/", 1)[-1].removesuffix(".git") or repo


def show(task_id: TaskId, as_json: AsJson = False, server: Server = None, token: Token = None) -> None:
    """A task: its state, its runs, and the evidence and confidence of its result."""
    with task_service(server, token) as service:
        task = service.get_task(task_id)
        runs = service.runs(task_id)
        given = [MemoriesGiven.of(e) for e in service.events(task_id, kinds=["memories_given"])]
        memories = [{"id": i, "line": line} for i, line in zip(given[-1].ids, given[-1].lines, strict=False)] \
            if given else []
        figures = service.progress(task_id)
        egress = service.events(task_id, kinds=["egress"], limit=1_000_000)
        followups = [FollowupSaid.of(e) for e in service.events(task_id, kinds=["followup"], limit=1_000_000)]
        if as_json:
            _print_json({**_record_json(task), "memories": memories, "progress": figures,
                         "followups": [{"note": f.note, "attempt": f.attempt,
                                        "comments": [c.to_json() for c in f.comments]} for f in followups],
                         "egress": [{"run_id": e.run_id, **e.data} for e in egress if isinstance(e.data, dict)],
                         "runs": [
                {"id": r.id, "attempt": r.attempt, "round": r.round, "state": r.state.value,
                 "result": {k: v for k, v in (r.result or {}).items() if k != "patch"}} for r in runs]})
            return
        out = console()
        out.print(f"[bold]{shown(task.id)}[/]  {_state(task.state)}  {shown(task.title, lines=False)}")
        out.print(f"[dim]repo {shown(task.repo, lines=False)} at {shown(task.base_ref, lines=False)} "
                  f"({shown((task.base_commit or '')[:12])}), branch {shown(task.branch, lines=False)}, "
                  f"model {shown(_model_line(task), lines=False)}, agent {shown(task.agent or 'errand')}[/]")
        print_progress(out, figures)
        if task.state is TaskState.NEEDS_INPUT:
            questions = service.events(task_id, kinds=["question"])
            if questions:
                out.print(f"[bold yellow]? {shown(text_of(questions[-1]))}[/]")
                out.print(f"[dim]answer with `errand answer {task.id} \"...\"`[/]")
        if egress:
            out.print("\n[bold]egress[/] (what each sandbox reached through its proxy; `errand logs` has it in order):")
            printer = _printer(service, task_id, out)
            for event in egress:
                printer.show(event)
            printer.close()
        if memories:
            out.print(f"\n[bold]memories given[/] ({len(memories)}; `errand memory show ID` for one):")
            for memory in memories:
                out.print(f"  {shown(memory['line'], lines=False)}")
        if followups:
            out.print(f"\n[bold]follow-ups[/] ({len(followups)}, each a round of its own):")
            for said in followups:
                _print_followup(out, said)
        try:
            ranked = service.round_runs(task_id)
        except ErrandError:
            ranked = []
        seen: dict[str, int] = {}  # patch -> the better-ranked attempt that made it
        for r in ranked:
            evidence = service.evidence(r)
            if evidence is not None:
                print_evidence(out, r, len(ranked), evidence)
            patch = r.outcome.patch if r.outcome else None
            if patch and patch in seen:
                out.print(f"  [dim]the same diff as attempt {seen[patch]}[/]")
            elif patch:
                seen[patch] = r.attempt
        _print_next_steps(out, service, task)


_NOTE_SHOWN = 300  # characters of a follow-up's first line that `errand show` prints


def _print_followup(out: Console, said: FollowupSaid) -> None:
    """A follow-up's note, then each line comment as ``path:lines (side)`` and what it said."""
    first, *rest = said.note.strip().splitlines() or [""]
    if len(first) > _NOTE_SHOWN:  # a long one-line note is cut here; `errand logs` has it whole
        first, rest = first[:_NOTE_SHOWN], [first]
    if said.comments and not first:
        first = f"{len(said.comments)} line comment{'' if len(said.comments) == 1 else 's'}"
    out.print(f"  - {shown(first, lines=False)}" + (" [dim]…[/]" if rest else ""))
    if said.attempt is not None:
        out.print(f"    [dim]on attempt {said.attempt}'s diff[/]")
    for comment in said.comments:
        who = f"@{comment.author}: " if comment.author else ""
        out.print(f"    {shown(comment.path, lines=False)}:{comment.lines} ({comment.side}) "
                  f"{shown((who + comment.body)[:_NOTE_SHOWN], lines=False)}")


def print_progress(out: Console, figures: dict[str, Any]) -> None:
    """Elapsed, steps, tokens and cost; then each attempt of the latest round against its budgets."""
    usage = figures["usage"]
    cost = figures_money(usage)
    out.print(f"{figures_duration(figures['seconds'])} elapsed · {usage['steps']} steps · "
              f"{tokens(usage['tokens'])} tokens ({tokens(usage['input_tokens'])} in{_cache_part(usage)}, "
              f"{tokens(usage['output_tokens'])} out) · {cost}" + (f" · round {figures['round']}" if figures['round']
                                                                    else ""))
    budgets = figures.get("budgets") or {}
    for attempt in figures["attempts"] if len(figures["attempts"]) > 1 or budgets else []:
        used = attempt["usage"]
        parts = [_against(str(used["steps"]), budgets.get("max_steps"), str) + " steps",
                 _against(tokens(used["tokens"]), budgets.get("max_tokens"), tokens) + " tokens",
                 _against(money(used["cost"]), budgets.get("max_cost"), money),
                 _against(figures_duration(attempt["seconds"]), budgets.get("max_seconds"), figures_duration)]
        which = f"round {attempt['round']}" + (f", attempt {attempt['attempt']}" if len(figures["attempts"]) > 1
                                               else "")  # the numbers --attempt takes, only in best-of-N
        out.print(f"  [dim]{which} ({attempt['state']}): {', '.join(parts)}[/]")


def _cache_part(usage: dict[str, Any]) -> str:
    """Of the input tokens, what the provider's prompt cache served and took: ``, of them 3.1k read
    from the prompt cache, 800 written to it``; empty when it did neither."""
    read, written = usage.get("cached_tokens") or 0, usage.get("cache_write_tokens") or 0
    parts = ([f"{tokens(read)} read from the prompt cache"] if read else []) + (
        [f"{tokens(written)} written to it" if read else f"{tokens(written)} written to the prompt cache"]
        if written else [])
    return f", of them {', '.join(parts)}" if parts else ""


def _against(used: str, limit: Any, show: Callable[[Any], str]) -> str:
    return used if limit is None else f"{used} of {show(limit)}"


def figures_money(usage: dict[str, Any]) -> str:
    if not usage.get("cost_known") and not usage.get("cost"):
        return "cost not reported by the provider"
    return money(usage["cost"]) + ("" if usage.get("cost_known") else " (some calls' price unknown)")


def _print_next_steps(out: Console, service: TaskApi, task: Task) -> None:
    if task.state is TaskState.READY_FOR_REVIEW:
        out.print(f"[dim]`errand diff {task.id}`, then `errand accept {task.id}`, `errand reject {task.id} "
                  f"--reason ...` or `errand followup {task.id} \"...\"`[/]")
    elif task.state is TaskState.ANSWERED:
        answered = service.events(task.id, kinds=["answered"], limit=1_000_000)
        report = Answered.of(answered[-1]).report if answered else None
        out.print("\n[bold green]answered[/] (it changed no file, so there is nothing to accept):")
        out.print("  " + shown(report or "no report was recorded").replace("\n", "\n  "))
        out.print(f"[dim]`errand followup {task.id} \"...\"` asks for more, or for the change itself[/]")
    elif task.state in (TaskState.FAILED, TaskState.CANCELLED):
        if task.state is TaskState.FAILED:
            failed = Failed.last(service.events(task.id, kinds=["failed", "recovered"], limit=1_000_000))
            reason = failed.reason if failed is not None else None
            out.print(f"\n[bold red]failed:[/] {shown(reason or 'no reason was recorded')}")
        out.print(f"[dim]`errand retry {task.id}` runs it again from where it started; `errand followup "
                  f"{task.id} \"...\"` does that with more instructions[/]")


def print_evidence(out: Console, run: Run, of: int, evidence: Evidence) -> None:
    """One finished attempt's evidence. Its heading names the round (a follow-up or retry opens
    a new one) and, in a best-of-N round, the attempt by the number ``--attempt`` takes."""
    outcome = run.outcome
    level = evidence.confidence.level
    colour = {"high": "green", "medium": "yellow", "low": "red"}.get(level, "red")
    heading = f"round {run.round}"
    if of > 1:
        heading += f", attempt {run.attempt}[/]  rank {shown(outcome.rank if outcome else '?')} of {of}"
    else:
        heading += "[/]"
    out.print(f"\n[bold]{heading}: {shown(outcome.status if outcome else None, lines=False)} — confidence "
              f"[{colour}]{shown(level)}[/]")
    for reason in evidence.confidence.reasons:
        out.print(f"  • {shown(reason, lines=False)}")
    if evidence.summary:
        # Its later lines are indented under it, so a summary cannot pass for a line of evidence.
        out.print("  summary: " + shown(evidence.summary).replace("\n", "\n" + " " * 11))
    for label, check in (("tests on base", evidence.tests_before), ("tests after", evidence.tests_after),
                         ("lint after", evidence.lint_after)):
        if check is not None:
            cached = ", from the cache" if check.cached else ""
            out.print(f"  {label}: {shown(check.describe(), lines=False)}  "
                      f"[dim]({shown(check.command, lines=False)}{cached})[/]")
            _print_check_detail(out, check)
    for label, names in (("fixed (fail → pass)", evidence.fixed_tests),
                         ("broken (pass → fail)", evidence.broken_tests),
                         ("gone (was failing), not fixed", evidence.gone_tests),
                         ("skipped (was failing), not fixed", evidence.skipped_tests)):
        if names:
            out.print(f"  {label}: {_names(names)}")
    environment = outcome.caches.get("environment") if outcome else None
    if environment:
        for line in environment_lines(environment):
            out.print(f"  {line}")
    out.print(f"  diff: {len(evidence.files)} file(s), +{evidence.additions} −{evidence.deletions}: "
              + shown(", ".join(f["path"] for f in evidence.files), lines=False))
    if evidence.test_files:
        out.print(f"  tests added or changed: {shown(', '.join(evidence.test_files), lines=False)}")
    for assumption in evidence.assumptions:
        out.print(f"  assumed: {shown(assumption, lines=False)}")
    checks = [failed for failed in evidence.failed_commands if "check" in failed]
    agents = [failed for failed in evidence.failed_commands if "check" not in failed]
    for failed in checks:
        out.print(f"  command that failed: [dim]exit {shown(failed['exit_code'])}[/] "
                  f"{shown(failed['command'], lines=False)} — the test command ({shown(failed['check'])}) failed "
                  f"before reporting any test: {shown(failed.get('cause') or 'it printed nothing', lines=False)}")
    if agents:
        out.print(f"  commands the agent ran that failed ({len(agents)} of {evidence.commands_run}):")
        for failed in agents[-5:]:
            out.print(f"    [dim]exit {shown(failed['exit_code'])}[/] {shown(failed['command'], lines=False)}")


def _names(names: list[str], limit: int = 10) -> str:
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return shown(", ".join(names[:limit]), lines=False) + more


def _print_check_detail(out: Console, check: TestRun) -> None:
    """A failing check's failing tests by name, and the last lines of its output."""
    if check.failing:
        out.print(f"    failing: {_names(check.failing)}")
    if not check.ok and check.output:
        out.print("    [dim]last lines of its output:[/]")
        for line in check.tail(8).split("\n"):
            out.print(f"    [dim]│[/] {shown(line, lines=False)}", highlight=False)


def environment_lines(environment: dict[str, Any]) -> list[str]:
    """What ``errand show`` says of the environment a run used: which, what it was keyed on,
    and whether it was reused (from the cache, or from another commit and refreshed)."""
    key = shown(environment.get("key"), lines=False)
    reused = environment.get("reused")
    if reused:
        state = f"reused from {shown(reused, lines=False)} (another commit, same dependencies)"
    elif environment.get("cached"):
        state = "reused (set up for this commit before)"
    else:
        state = "built for this round"
    lines = [f"environment: {key}, {state}"]
    keyed = [shown(item, lines=False) for item in environment.get("keyed_on") or []]
    lines.append("  keyed on: " + ", ".join([*keyed, "errand.toml's setup", "the image"]))
    refreshed = [shown(command, lines=False) for command in environment.get("refreshed") or []]
    if refreshed:
        lines.append("  refreshed for the commit with: " + "; ".join(refreshed))
    if environment.get("refresh_failed"):
        lines.append(f"  [yellow]the refresh {shown(environment['refresh_failed'], lines=False)} failed[/]: "
                     "the environment was used as it was")
    return lines


def diff(
    task_id: TaskId,
    attempt: Annotated[int | None, typer.Option("--attempt", metavar="N", help="Another attempt than the best: "
                                                "its number, as `errand show` gives it.")] = None,
    stat: Annotated[bool, typer.Option("--stat", help="Only which files changed, and how much.")] = False,
    server: Server = None,
    token: Token = None,
) -> None:
    """The task's diff (the best attempt's, unless --attempt), coloured on a terminal; exact when piped."""
    with task_service(server, token) as service:
        run_ = service.chosen_run(task_id, attempt)
        patch = run_.outcome.patch if run_.outcome else ""
        out = console()
        if not patch.strip():
            # Said on stderr and in the exit code, so `errand diff ID > fix.patch && git apply fix.patch`
            # stops here instead of applying nothing.
            console(stderr=True).print(f"{shown(task_id)} changed nothing: round {run_.round}, attempt {run_.attempt} "
                                    f"has no diff (`errand show {shown(task_id)}` says how it ended)")
            raise typer.Exit(EXIT_ERROR)
        if stat:
            evidence = service.evidence(run_)
            for f in (evidence.files if evidence else []):
                out.print(f"{shown(f['path'], lines=False)}  [green]+{f['additions']}[/] [red]−{f['deletions']}[/]")
        elif out.is_terminal:
            print_patch(out, patch)
        else:
            sys.stdout.write(patch)  # the patch itself, byte for byte, for `git apply` and friends


def print_patch(out: Console, patch: str) -> None:
    """A patch for a person to read: coloured, every control character in it shown, and long lines
    wrapped rather than cut at the terminal's edge (code past the edge would be hidden from review)."""
    from rich.syntax import Syntax  # Pygments' lexers only for a diff on a terminal

    out.print(Syntax(printable(patch), "diff", theme="ansi_dark", background_color="default", word_wrap=True))


def logs(
    task_id: TaskId,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep streaming until the task settles.")] = False,
    attempt: Annotated[int | None, typer.Option("--attempt", metavar="N", min=1,
                                                help="Only attempt N's lines (and the task's own).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per event (the HTTP API's fields), "
                                                          "one per line.")] = False,
    server: Server = None,
    token: Token = None,
) -> None:
    """The task's log: every step of the agent, command and output, as it happens with -f."""
    with task_service(server, token) as service:
        task = service.get_task(task_id)
        if attempt is not None and attempt > task.attempts:
            raise ConfigError(f"{task_id} runs {task.attempts} attempt(s) a round; there is no attempt {attempt}",
                              code="no_such_attempt")
        printer = None if as_json else _printer(service, task_id, console())
        show_event: Callable[[Event], None] = _print_event_json if printer is None else printer.show
        if attempt is not None:
            show_event = _only_attempt(service, task_id, attempt, show_event)
        try:
            if follow:
                _follow(service, task_id, console(stderr=as_json), show_event, printer)
            else:
                for event in service.events(task_id, limit=1_000_000):
                    show_event(event)
        finally:
            if printer is not None:
                printer.close()


def _attempts_of(service: TaskApi, task_id: str) -> Callable[[str], int | None]:
    """A run's attempt number, the task's runs read again when a new round brings new runs."""
    attempts: dict[str, int] = {}

    def attempt_of(run_id: str) -> int | None:
        if run_id not in attempts:
            attempts.update({run.id: run.attempt for run in service.runs(task_id)})
        return attempts.get(run_id)

    return attempt_of


def _printer(service: TaskApi, task_id: str, out: Console) -> LogPrinter:
    """A :class:`LogPrinter` on ``out``, each run's lines tagged with its attempt when a round has several."""
    if service.get_task(task_id).attempts < 2:
        return LogPrinter(out)
    attempt_of = _attempts_of(service, task_id)

    def tag(event: Event) -> str:
        number = attempt_of(event.run_id) if event.run_id is not None else None
        return f"#{number}" if number is not None else ""

    return LogPrinter(out, tag)


def _only_attempt(service: TaskApi, task_id: str, attempt: int,
                  show_event: Callable[[Event], None]) -> Callable[[Event], None]:
    attempt_of = _attempts_of(service, task_id)

    def show(event: Event) -> None:
        if event.run_id is None or attempt_of(event.run_id) == attempt:
            show_event(event)

    return show


def _follow(service: TaskApi, task_id: str, out: Console, show_event: Callable[[Event], None] | None = None,
            printer: LogPrinter | None = None) -> None:
    """Show the task's events (on a :class:`LogPrinter` on ``out`` unless ``show_event``) until it settles."""
    if show_event is None:
        printer = _printer(service, task_id, out)
        show_event = printer.show
    for event in service.follow(task_id, settled=_SETTLED):
        show_event(event)
    if printer is not None:
        printer.close()
    out.print(f"[bold]{shown(task_id)}[/] is {_state(service.get_task(task_id).state)}")


def _print_event_json(event: Event) -> None:
    print(json.dumps(_record_json(event)), flush=True)


# ------------------------------------------------------------------ steering and review


def accept(
    task_id: TaskId,
    attempt: Annotated[int | None, typer.Option("--attempt", metavar="N", help="Accept another attempt than the "
                                                "best: its number, as `errand show` gives it.")] = None,
    into: Annotated[Path | None, typer.Option(
        "--into", metavar="PATH", help="The local clone (for a task made from a URL).")] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Accept without asking even a diff whose tests fail "
                                                          "after it, at low confidence, or that deletes files "
                                                          "(off a terminal such a diff is refused without it).")]
    = False,
    as_json: AsJson = False,
    server: Server = None,
    token: Token = None,
) -> None:
    """Commit the task's diff on its branch errand/<id>-<slug>; your checkout is left as it is.
    A diff whose tests fail after it, at low confidence, or that deletes files asks first."""
    with task_service(server, token) as service:
        try:
            accepted = service.accept(task_id, attempt=attempt, into=into, confirm=yes)
        except NeedsConfirmation as risky:
            console(stderr=True).print(f"[yellow]{shown(task_id)}'s diff needs a second look:[/]")
            confirm(f"accept {task_id}", risky.reasons, yes=False)
            accepted = service.accept(task_id, attempt=attempt, into=into, confirm=True)
        if not server:
            from errand.cli.forge import publish_if_linked  # a task from a forge issue goes back as a pull request

            publish_if_linked(service, task_id)
        repo = _accepted_into(service, task_id, into, local=not server)
        steps = _next_steps(repo, accepted.branch, local=not server)
        if as_json:
            _print_json({**_record_json(accepted), "repo": repo, "next": steps})
            return
        out = console()
        out.print(f"[green]accepted[/] {shown(task_id)}: commit {shown(accepted.commit[:12])} on branch "
                  f"[bold]{shown(accepted.branch, lines=False)}[/]")
        for what, command in steps.items():
            if command is not None:
                out.print(f"[dim]{what}: {shown(command, lines=False)}[/]")


def _accepted_into(service: TaskApi, task_id: str, into: Path | None, *, local: bool) -> str:
    if into is None:
        return service.get_task(task_id).repo
    return str(into.resolve() if local else into)  # a server's path is not resolved against this machine


def _next_steps(repo: str, branch: str, *, local: bool) -> dict[str, str | None]:
    """The commands that take an accepted branch on: check it out, push it (None: no remote to push to)."""
    remote = _push_remote(Path(repo)) if local else "origin"
    where = f"git -C {shlex.quote(repo)}"
    return {"switch": f"{where} switch {shlex.quote(branch)}",
            "push": None if remote is None else f"{where} push -u {shlex.quote(remote)} {shlex.quote(branch)}"}


def _push_remote(repo: Path) -> str | None:
    remotes = run_git(["remote"], repo, check=False).split()
    return "origin" if "origin" in remotes else (remotes[0] if remotes else None)


def reject(task_id: TaskId,
           reason: Annotated[str, typer.Option("--reason", metavar="TEXT", help="Why; errand remembers it.")],
           as_json: AsJson = False, server: Server = None, token: Token = None) -> None:
    """Reject the task's result."""
    with task_service(server, token) as service:
        review = service.reject(task_id, reason)
        _say(as_json, review, f"[red]rejected[/] {shown(task_id)}")


Commented = Annotated[list[str] | None, typer.Option(
    "--comment", metavar="PATH:LINES: TEXT",
    help="A comment on lines of the diff as the work left the file, as a compiler would say it: "
         "`--comment \"src/x.py:10-12: use the constant\"` (LINES is 10 or 10-12); repeat it for more. The next "
         "round sees each with its file, its lines quoted, and the text.")]
OldCommented = Annotated[list[str] | None, typer.Option(
    "--old-comment", metavar="PATH:LINES: TEXT",
    help="The same, on lines numbered as the file was at the base (a removed line).")]
CommentedAttempt = Annotated[int | None, typer.Option(
    "--attempt", metavar="N", min=1,
    help="The comments are on attempt N's diff (of the last round), not the best-ranked attempt's.")]


def followup(task_id: TaskId,
             text: Annotated[str, typer.Argument(metavar="TEXT", help="What to do next (optional with --comment).")]
             = "", comment: Commented = None, old_comment: OldCommented = None, attempt: CommentedAttempt = None,
             start_worker: StartWorker = True, as_json: AsJson = False, server: Server = None,
             token: Token = None) -> None:
    """Ask for more work: a new round on the same branch (of a task ready for review, rejected,
    failed or cancelled); of an accepted task, a new task that starts from its commit."""
    with task_service(server, token) as service:
        comments = [_line_comment(said, "new") for said in comment or []]
        comments += [_line_comment(said, "old") for said in old_comment or []]
        if attempt is not None and not comments:
            raise ConfigError("--attempt names the attempt whose diff --comment is on: give a --comment too",
                              code="bad_attempt")
        done = service.followup(task_id, text, comments, attempt=attempt)
        queued = task_id
        if isinstance(done, Task):
            queued = done.id
            _say(as_json, done, f"{shown(task_id)} was accepted, so the follow-up is a new task [bold]{shown(done.id)}"
                                f"[/], starting from {shown(done.base_ref, lines=False)} "
                                f"({shown((done.base_commit or '')[:12])})")
        else:
            _say(as_json, done, f"{shown(task_id)} queued again with the follow-up")
        _queued_next(service, queued, as_json, start_worker and not server)


def _line_comment(said: str, side: Side) -> LineComment:
    """``PATH:LINE: TEXT`` or ``PATH:FIRST-LAST: TEXT`` as a comment (checked against the diff later)."""
    match = re.fullmatch(r"(.+?):(\d+)(?:-(\d+))?:(.*)", said, flags=re.DOTALL)
    if match is None:
        option = "--comment" if side == "new" else "--old-comment"
        raise ConfigError(f"{option} {said!r}: say it as PATH:LINE: TEXT or PATH:FIRST-LAST: TEXT "
                          "(e.g. \"src/x.py:10-12: use the constant\")", code="bad_lines")
    path, first, last, body = match.groups()
    return LineComment.of(path, int(first), int(last or first), body, side)


def retry(task_id: TaskId, start_worker: StartWorker = True, as_json: AsJson = False, server: Server = None,
          token: Token = None) -> None:
    """Run a failed or cancelled task again: a new round from where its last one started (the base,
    or the last finished round's work); its earlier rounds and log are kept."""
    with task_service(server, token) as service:
        task = service.retry(task_id)
        _say(as_json, task, f"{shown(task_id)} queued again (a retry)")
        _queued_next(service, task_id, as_json, start_worker and not server)


def _queued_next(service: TaskApi, task_id: str, as_json: bool, start_worker: bool) -> None:
    """After a task was queued: a worker to run it, and how to watch it."""
    out = console(stderr=as_json)
    if start_worker:
        _ensure_worker(out, service.get_task(task_id).model_endpoint)
    if not as_json:
        out.print(f"[dim]follow it with `errand logs -f {shown(task_id)}`[/]")


def answer(task_id: TaskId, text: Annotated[str, typer.Argument(metavar="TEXT", help="Your answer.")],
           as_json: AsJson = False, server: Server = None, token: Token = None) -> None:
    """Answer the question the task is waiting on; it resumes."""
    with task_service(server, token) as service:
        event_id = service.answer(task_id, text)
        _say(as_json, {"event_id": event_id}, f"answer sent to {shown(task_id)}")


def message(task_id: TaskId, text: Annotated[str, typer.Argument(metavar="TEXT", help="Your message.")],
            as_json: AsJson = False, server: Server = None, token: Token = None) -> None:
    """Send a running task a message; the agent gets it at its next step."""
    with task_service(server, token) as service:
        event_id = service.message(task_id, text)
        _say(as_json, {"event_id": event_id},
             f"message sent to {shown(task_id)}; `errand logs {shown(task_id)}` shows when it is delivered")


def cancel(task_id: TaskId, yes: Yes = False, as_json: AsJson = False, server: Server = None,
           token: Token = None) -> None:
    """Cancel a task; its sandbox is ended and nothing lands. Asks first (--yes does not)."""
    with task_service(server, token) as service:
        task = service.get_task(task_id)
        if task.state not in FINAL:  # a final task's refusal is the service's to say
            confirm(f"cancel {task_id}", [f"{task.title} is {task.state.value}: cancelling ends its sandboxes, "
                                          "and nothing of it lands"], yes=yes)
        task = service.cancel(task_id)
        _say(as_json, task, f"cancelled {shown(task_id)}")


def _say(as_json: bool, result: object, text: str) -> None:
    """What a command did: ``result`` as the HTTP API returns it with --json, else ``text`` (markup)."""
    if as_json:
        _print_json(_record_json(result) if dataclasses.is_dataclass(result) else result)
    else:
        console().print(text)


# ------------------------------------------------------------------ formatting


def _state(state: TaskState) -> str:
    return f"[{_STATE_STYLE.get(state.value, '')}]{state.value}[/]"


def age(seconds: float) -> str:
    """``3d``, ``5h``, ``12m``, ``40s``: how long ago, roughly."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{max(0, int(seconds))}s"


def _model_line(task: Task) -> str:
    if task.model_endpoint is None:
        return f"{task.model} (no endpoint recorded: the worker's own)"
    return task.model_endpoint.describe()


def _record_json(record: object) -> Any:
    """A record (a task, a run, an event, a review, an accept) with the fields and names the HTTP API
    gives it. Control characters in it are left to ``json.dumps``, which escapes them: the data stays exact."""
    assert dataclasses.is_dataclass(record) and not isinstance(record, type)
    return {field.name: _plain(getattr(record, field.name)) for field in dataclasses.fields(record)}


def _plain(value: object) -> object:
    """A record inside a record (a task's model endpoint) as its fields, as the API gives it."""
    return dataclasses.asdict(value) if dataclasses.is_dataclass(value) and not isinstance(value, type) else value


def _print_json(value: object) -> None:
    print(json.dumps(value, indent=2))
