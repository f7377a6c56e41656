"""The task commands of errand's command line: intake, watching, steering and review.

They call :class:`~errand.tasks.service.TaskService` on the local store, the same
service the HTTP API calls. ``errand run`` starts a background worker when none
is running, so a person hands the task over and goes on working.

With ``--server URL`` (or ``ERRAND_SERVER``) they call an ``errand serve``
instead, through :class:`~errand.server.client.ErrandClient`, which has the
service's methods; the server's engine runs the tasks.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.syntax import Syntax
from rich.table import Table

from errand import _settings
from errand._text import printable
from errand.cli_events import print_event, shown
from errand.errors import ConfigError, ErrandError
from errand.models import ModelEndpoint
from errand.repo.git import run_git
from errand.repo.workcopy import source_name
from errand.tasks.engine import LocalEngine
from errand.tasks.evidence import Evidence
from errand.tasks.lifecycle import ACTIVE, TaskState
from errand.tasks.records import Event, RunState, Task
from errand.tasks.service import TaskService, issue_instruction
from errand.tasks.store import TaskStore
from errand.tasks.workers import WorkerInfo, notes, running_worker, stop_worker, worker_notes

if TYPE_CHECKING:
    from errand.server.client import ErrandClient

__all__ = ["age", "print_event", "print_evidence", "print_patch", "register", "shown"]

EXIT_ERROR = 1
EXIT_USAGE = 2
_SETTLED = {TaskState.READY_FOR_REVIEW, TaskState.ACCEPTED, TaskState.REJECTED, TaskState.FAILED,
            TaskState.CANCELLED}
_STATE_STYLE = {"queued": "cyan", "preparing": "cyan", "running": "blue", "needs_input": "bold yellow",
                "ready_for_review": "bold green", "accepted": "green", "rejected": "red", "failed": "bold red",
                "cancelled": "dim"}


def _out(*, stderr: bool = False) -> Console:
    # No emoji codes: ``:warning:`` in an agent's text must print as typed, not as a picture.
    return Console(highlight=False, emoji=False, stderr=stderr)


Server = Annotated[str | None, typer.Option(
    "--server", envvar="ERRAND_SERVER", metavar="URL", help="Use an errand server instead of the local store.")]
Token = Annotated[str | None, typer.Option("--token", envvar="ERRAND_TOKEN", help="The server's token.")]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON (the HTTP API's fields) instead of text.")]


@contextmanager
def _service(server: str | None = None, token: str | None = None) -> Iterator[TaskService | ErrandClient]:
    """The local store, or the server at ``server``, with errand's errors turned into one red
    line and an exit code."""
    try:
        if server:
            from errand.server.client import ErrandClient  # httpx only when a server is named

            with ErrandClient(server, token=token) as client:
                yield client
        else:
            with TaskStore.open() as store:
                yield TaskService(store)
    except ErrandError as error:
        Console(stderr=True).print(f"error: {printable(error.message)}", style="red", markup=False,
                                   highlight=False, soft_wrap=True)
        raise typer.Exit(EXIT_USAGE if isinstance(error, ConfigError) else EXIT_ERROR) from None


TaskId = Annotated[str, typer.Argument(metavar="ID", help="The task's id (see `errand ls`).")]


def register(app: typer.Typer) -> None:
    for command in (run, ls, show, diff, logs, accept, reject, followup, answer, message, cancel):
        app.command(command.__name__.rstrip("_"))(command)
    app.add_typer(worker_app, name="worker")


# ------------------------------------------------------------------ intake


def run(
    instruction: Annotated[str | None, typer.Argument(help="What the agent should do.")] = None,
    repo: Annotated[str, typer.Option("--repo", help="A local git repository or a git URL.")] = ".",
    base: Annotated[str, typer.Option("--base", help="The ref the work starts from.")] = "HEAD",
    model: Annotated[str | None, typer.Option("--model", help="A [models.NAME] from $ERRAND_HOME/config.toml, or "
                                              "provider:model (default: $ERRAND_MODEL, then the file's model).")
                     ] = None,
    attempts: Annotated[int, typer.Option("--attempts", help="Attempts run in parallel, ranked by evidence.")] = 1,
    issue: Annotated[Path | None, typer.Option("--issue", help="Take the task from an issue in Markdown.")] = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Stream the task's log until it settles.")] = False,
    start_worker: Annotated[bool, typer.Option("--worker/--no-worker",
                                               help="Start a background worker if none runs.")] = True,
    as_json: Annotated[bool, typer.Option("--json", help="Print the task as JSON (the HTTP API's fields); with "
                                                          "-f, once it settles (the log goes to stderr).")] = False,
    server: Server = None,
    token: Token = None,
) -> None:
    """Hand a task to an agent; it runs in the background and comes back as a diff to review."""
    with _service(server, token) as service:
        title = None
        if issue is not None:
            if instruction is not None:
                raise ConfigError("give an instruction or --issue FILE, not both", code="invalid_input")
            title, instruction = issue_instruction(issue)
        task = service.submit(instruction or "", repo=repo, base=base, model=model, attempts=attempts, title=title)
        # With --json, stdout carries the one JSON object and everything said on the way goes to stderr.
        out = _out(stderr=as_json)
        if not as_json:
            out.print(f"[bold]{task.id}[/] queued: {shown(task.title, lines=False)}")
        if start_worker and not server:
            _ensure_worker(out, task.model_endpoint)
        if follow:
            _follow(service, task.id, out)
            task = service.store.get_task(task.id)
        elif not as_json:
            out.print(f"[dim]follow it with `errand logs -f {task.id}`; review with `errand show {task.id}`[/]")
        if as_json:
            _print_json(_record_json(task))


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
    state: Annotated[str | None, typer.Option("--state", help="Only tasks in this state.")] = None,
    repo: Annotated[str | None, typer.Option("--repo", help="Only tasks of this repository.")] = None,
    limit: Annotated[int, typer.Option("--limit", help="How many, newest first.")] = 20,
    as_json: AsJson = False,
    server: Server = None,
    token: Token = None,
) -> None:
    """List tasks, newest first."""
    with _service(server, token) as service:
        if state is not None and state not in TaskState.__members__.values():
            raise ConfigError(f"unknown state {state!r}; states are {', '.join(TaskState)}", code="invalid_state")
        tasks = service.store.list_tasks(state=state, repo=None if repo is None else source_name(repo), limit=limit)
        if as_json:
            _print_json([_record_json(t) for t in tasks])
            return
        table = Table("ID", "STATE", "AGE", "ATTEMPTS", "TITLE", "REPO", box=None, pad_edge=False)
        for task in tasks:
            table.add_row(shown(task.id), _state(task.state), age(time.time() - task.created_at), str(task.attempts),
                          shown(task.title, lines=False), shown(task.repo, lines=False))
        _out().print(table)


def show(task_id: TaskId, as_json: AsJson = False, server: Server = None, token: Token = None) -> None:
    """A task: its state, its runs, and the evidence and confidence of its result."""
    with _service(server, token) as service:
        task = service.store.get_task(task_id)
        runs = service.store.runs(task_id)
        given = service.store.events(task_id, kinds=["memories_given"])
        memories = [{"id": i, "line": line} for i, line in zip(given[-1].data.get("ids", []),
                                                               given[-1].data.get("lines", []), strict=False)] \
            if given else []
        if as_json:
            _print_json({**_record_json(task), "memories": memories, "runs": [
                {"id": r.id, "attempt": r.attempt, "round": r.round, "state": r.state.value,
                 "result": {k: v for k, v in (r.result or {}).items() if k != "patch"}} for r in runs]})
            return
        out = _out()
        out.print(f"[bold]{shown(task.id)}[/]  {_state(task.state)}  {shown(task.title, lines=False)}")
        out.print(f"[dim]repo {shown(task.repo, lines=False)} at {shown(task.base_ref, lines=False)} "
                  f"({shown((task.base_commit or '')[:12])}), branch {shown(task.branch, lines=False)}, "
                  f"model {shown(_model_line(task), lines=False)}[/]")
        if task.state is TaskState.NEEDS_INPUT:
            questions = service.store.events(task_id, kinds=["question"])
            if questions:
                out.print(f"[bold yellow]? {shown(questions[-1].data.get('text'))}[/]")
                out.print(f"[dim]answer with `errand answer {task.id} \"...\"`[/]")
        if memories:
            out.print(f"\n[bold]memories given[/] ({len(memories)}; `errand memory show ID` for one):")
            for memory in memories:
                out.print(f"  {shown(memory['line'], lines=False)}")
        try:
            ranked = service.round_runs(task_id)
        except ErrandError:
            ranked = []
        for r in ranked:
            evidence = service.evidence(r)
            if evidence is not None:
                print_evidence(out, r.attempt, int(r.result["rank"]), len(ranked), evidence, r.result)
        if task.state is TaskState.READY_FOR_REVIEW:
            out.print(f"[dim]`errand diff {task.id}`, then `errand accept {task.id}`, `errand reject {task.id} "
                      f"--reason ...` or `errand followup {task.id} \"...\"`[/]")


def print_evidence(out: Console, attempt: int, rank: int, of: int, evidence: Evidence, result: dict[str, Any]) -> None:
    level = evidence.confidence.level
    colour = {"high": "green", "medium": "yellow", "low": "red"}.get(level, "red")
    ranking = f"  rank {rank} of {of}" if of > 1 else ""
    out.print(f"\n[bold]attempt {attempt}[/]{ranking}: {shown(result.get('status'), lines=False)} — confidence "
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
    environment = (result.get("caches") or {}).get("environment")
    if environment:
        state = "from the cache" if environment.get("cached") else "set up for this round"
        out.print(f"  environment: {state} [dim]({shown(environment.get('key'), lines=False)})[/]")
    out.print(f"  diff: {len(evidence.files)} file(s), +{evidence.additions} −{evidence.deletions}: "
              + shown(", ".join(f["path"] for f in evidence.files), lines=False))
    if evidence.test_files:
        out.print(f"  tests added or changed: {shown(', '.join(evidence.test_files), lines=False)}")
    for assumption in evidence.assumptions:
        out.print(f"  assumed: {shown(assumption, lines=False)}")
    if evidence.failed_commands:
        out.print(f"  commands that failed ({len(evidence.failed_commands)} of {evidence.commands_run} run):")
        for failed in evidence.failed_commands[-5:]:
            out.print(f"    [dim]exit {shown(failed['exit_code'])}[/] {shown(failed['command'], lines=False)}")


def diff(
    task_id: TaskId,
    attempt: Annotated[int | None, typer.Option("--attempt", help="Another attempt than the best.")] = None,
    stat: Annotated[bool, typer.Option("--stat", help="Only which files changed, and how much.")] = False,
    server: Server = None,
    token: Token = None,
) -> None:
    """The task's diff (the best attempt's, unless --attempt), coloured on a terminal; exact when piped."""
    with _service(server, token) as service:
        run_ = service.chosen_run(task_id, attempt)
        patch = str(run_.result.get("patch") or "")
        out = _out()
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
    out.print(Syntax(printable(patch), "diff", theme="ansi_dark", background_color="default", word_wrap=True))


def logs(
    task_id: TaskId,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep streaming until the task settles.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per event (the HTTP API's fields), "
                                                          "one per line.")] = False,
    server: Server = None,
    token: Token = None,
) -> None:
    """The task's log: every step of the agent, command and output, as it happens with -f."""
    with _service(server, token) as service:
        service.store.get_task(task_id)
        show_event = _print_event_json if as_json else functools.partial(print_event, _out())
        if follow:
            _follow(service, task_id, _out(stderr=as_json), show_event)
        else:
            for event in service.store.events(task_id, limit=1_000_000):
                show_event(event)


def _follow(service: TaskService | ErrandClient, task_id: str, out: Console,
            show_event: Callable[[Event], None] | None = None) -> None:
    """Show the task's events (``print_event`` on ``out`` unless ``show_event``) until it settles."""
    show_event = show_event or functools.partial(print_event, out)
    if not isinstance(service, TaskService):
        for event in service.follow(task_id, settled=_SETTLED):
            show_event(event)
        out.print(f"[bold]{shown(task_id)}[/] is {_state(service.store.get_task(task_id).state)}")
        return
    after = 0
    while True:
        task = service.store.get_task(task_id)  # read before the events: none is missed at the end
        for event in service.store.events(task_id, after):
            show_event(event)
            after = event.id
        if task.state in _SETTLED:
            out.print(f"[bold]{shown(task.id)}[/] is {_state(task.state)}")
            return
        time.sleep(0.2)


def _print_event_json(event: Event) -> None:
    print(json.dumps(_record_json(event)), flush=True)


# ------------------------------------------------------------------ steering and review


def accept(
    task_id: TaskId,
    attempt: Annotated[int | None, typer.Option("--attempt", help="Accept another attempt than the best.")] = None,
    into: Annotated[Path | None, typer.Option("--into", help="The local clone (for a task made from a URL).")] = None,
    as_json: AsJson = False,
    server: Server = None,
    token: Token = None,
) -> None:
    """Commit the task's diff on its branch errand/<id>-<slug>; your checkout is left as it is."""
    with _service(server, token) as service:
        accepted = service.accept(task_id, attempt=attempt, into=into)
        repo = _accepted_into(service, task_id, into, local=not server)
        steps = _next_steps(repo, accepted.branch, local=not server)
        if as_json:
            _print_json({**_record_json(accepted), "repo": repo, "next": steps})
            return
        out = _out()
        out.print(f"[green]accepted[/] {shown(task_id)}: commit {shown(accepted.commit[:12])} on branch "
                  f"[bold]{shown(accepted.branch, lines=False)}[/]")
        for what, command in steps.items():
            if command is not None:
                out.print(f"[dim]{what}: {shown(command, lines=False)}[/]")


def _accepted_into(service: TaskService | ErrandClient, task_id: str, into: Path | None, *, local: bool) -> str:
    if into is None:
        return service.store.get_task(task_id).repo
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
           reason: Annotated[str, typer.Option("--reason", help="Why; errand remembers it.")],
           as_json: AsJson = False, server: Server = None, token: Token = None) -> None:
    """Reject the task's result."""
    with _service(server, token) as service:
        review = service.reject(task_id, reason)
        _say(as_json, review, f"[red]rejected[/] {shown(task_id)}")


def followup(task_id: TaskId, text: Annotated[str, typer.Argument(help="What to do next.")],
             as_json: AsJson = False, server: Server = None, token: Token = None) -> None:
    """Ask for more work on the result: a new round on the same branch."""
    with _service(server, token) as service:
        review = service.followup(task_id, text)
        _say(as_json, review, f"{shown(task_id)} queued again with the follow-up")
        if not server:
            _ensure_worker(_out(stderr=as_json), service.store.get_task(task_id).model_endpoint)


def answer(task_id: TaskId, text: Annotated[str, typer.Argument(help="Your answer.")],
           as_json: AsJson = False, server: Server = None, token: Token = None) -> None:
    """Answer the question the task is waiting on; it resumes."""
    with _service(server, token) as service:
        event_id = service.answer(task_id, text)
        _say(as_json, {"event_id": event_id}, f"answer sent to {shown(task_id)}")


def message(task_id: TaskId, text: Annotated[str, typer.Argument(help="Your message.")],
            as_json: AsJson = False, server: Server = None, token: Token = None) -> None:
    """Send a running task a message; the agent gets it at its next step."""
    with _service(server, token) as service:
        event_id = service.message(task_id, text)
        _say(as_json, {"event_id": event_id},
             f"message sent to {shown(task_id)}; `errand logs {shown(task_id)}` shows when it is delivered")


def cancel(task_id: TaskId, as_json: AsJson = False, server: Server = None, token: Token = None) -> None:
    """Cancel a task; its sandbox is ended and nothing lands."""
    with _service(server, token) as service:
        task = service.cancel(task_id)
        _say(as_json, task, f"cancelled {shown(task_id)}")


def _say(as_json: bool, result: object, text: str) -> None:
    """What a command did: ``result`` as the HTTP API returns it with --json, else ``text`` (markup)."""
    if as_json:
        _print_json(_record_json(result) if dataclasses.is_dataclass(result) else result)
    else:
        _out().print(text)


worker_app = typer.Typer(help="Run queued tasks here; or see, or stop, the worker serving this errand home.")


@worker_app.callback(invoke_without_command=True)
def worker(
    context: typer.Context,
    concurrency: Annotated[int, typer.Option("--concurrency", help="Tasks run at once.")] = 2,
    exit_when_idle: Annotated[float | None, typer.Option("--exit-when-idle", metavar="SECONDS",
                                                         help="Exit after this long with nothing to do.")] = None,
) -> None:
    """Run queued tasks in this process until interrupted (one worker per errand home)."""
    if context.invoked_subcommand is not None:
        return
    with _service() as service:
        assert isinstance(service, TaskService)  # a worker runs on this machine's store
        engine = LocalEngine(service.store, concurrency=concurrency)
        Console(stderr=True).print(f"errand worker {engine.worker}: {concurrency} at a time, store "
                                   f"{service.store.engine.url}", highlight=False)
        asyncio.run(_serve_until_signalled(engine, exit_when_idle))


@worker_app.command("status")
def worker_status(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """Whether a worker serves this errand home, and what it was started with.

    Its pid, since when, how many tasks at a time, the endpoints and key variables
    of its environment, and the tasks it holds."""
    with _service() as service:
        assert isinstance(service, TaskService)
        info = running_worker()
        held = _held_tasks(service.store, info) if info is not None else []
    home = str(_settings.home())
    if as_json:
        described = {} if info is None else {k: v for k, v in info.to_json().items() if k not in ("keys", "variables")}
        print(json.dumps({"running": info is not None, "home": home, **described,
                          "keys": sorted(info.keys) if info is not None else [], "tasks": held}, indent=2))
        return
    out = _out()
    if info is None:
        out.print(f"no worker serves {shown(home, lines=False)}; `errand run` starts one, "
                  "`errand worker` runs one here")
        return
    since = f" for {age(time.time() - info.started_at)}" if info.started_at else ""
    out.print(f"[bold]worker pid {info.pid}[/] serves {shown(home, lines=False)}{since}"
              + (f", {info.concurrency} task(s) at a time" if info.concurrency else ""))
    for name, value in info.base_urls.items():
        out.print(f"  endpoint {name}={shown(value, lines=False)}")
    for described_model in info.models.values():
        out.print(f"  model {shown(described_model, lines=False)}")
    out.print(f"  keys: {', '.join(f'${name}' for name in info.keys) or 'none'}")
    out.print(f"  tasks: {', '.join(held) or 'none'}")


@worker_app.command("stop")
def worker_stop(timeout: Annotated[float, typer.Option("--timeout", metavar="SECONDS",
                                                       help="How long to wait for it to exit.")] = 60.0) -> None:
    """Stop the worker serving this errand home, and wait until it has exited.

    It gets SIGTERM: its sandboxes end and its running tasks are requeued for the next worker."""
    with _service() as service:
        assert isinstance(service, TaskService)
        info = running_worker()
        held = _held_tasks(service.store, info) if info is not None else []
        stopped = stop_worker(timeout)
    if stopped is None:
        _out().print(f"no worker serves {shown(_settings.home(), lines=False)}")
        return
    requeued = f"; requeued {', '.join(held)}" if held else ""
    _out().print(f"stopped the worker (pid {stopped.pid}){requeued}")


def _held_tasks(store: TaskStore, info: WorkerInfo) -> list[str]:
    """The active tasks with a run of ``info``'s worker in progress."""
    active = [task for state in sorted(ACTIVE) for task in store.list_tasks(state=state, limit=10_000)]
    return [task.id for task in active
            if any(r.state is RunState.RUNNING and r.worker == info.worker for r in store.runs(task.id))]


async def _serve_until_signalled(engine: LocalEngine, exit_when_idle: float | None) -> None:
    """SIGINT or SIGTERM stops the worker cleanly: its sandboxes end and its runs are requeued."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    await engine.serve(stop=stop, exit_when_idle=exit_when_idle)


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
