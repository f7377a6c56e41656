"""``errand forge``: errand on GitHub, Gitea (Forgejo) and GitLab — connect a repository,
open pull requests, catch up.

``errand run --issue owner/name#42`` and ``errand accept`` call in here too: a task
read from a forge issue goes back to the forge as a pull request once accepted.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import secrets
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from errand._text import printable
from errand.errors import ConfigError, ErrandError
from errand.forge.hosts.kinds import KINDS, kind_of, open_forge, parse_issue
from errand.forge.links import LinkStore
from errand.forge.settings import ForgeSettings, settings_path
from errand.tasks.api import TaskApi
from errand.tasks.records import Task
from errand.tasks.service import TaskService
from errand.tasks.store.tasks import TaskStore

if TYPE_CHECKING:
    from errand.forge.outbound.publish import Publisher

__all__ = ["forge_app", "publish_if_linked", "submit_forge_issue"]

forge_app = typer.Typer(help="errand on GitHub, Gitea and GitLab: issues in, pull requests out.",
                        no_args_is_help=True, rich_markup_mode=None)
#: The token scopes of which one is needed to push and open pull requests (None: the forge does not say).
_WRITE_SCOPES = {"github": ("repo", "public_repo"), "gitlab": ("api",)}
_SCOPE_HINT = {"github": "the `repo` scope (or `public_repo`)", "gitlab": "the `api` scope"}
#: What to tick where the forge's webhook is added.
_EVENTS = {"github": "content type application/json, events: issues, issue comments, pull request reviews and "
                     "review comments",
           "gitea": "a Gitea (or Forgejo) webhook, POST, content type application/json, events: issues, issue "
                    "label, issue comment, pull request comment, pull request reviewed",
           "gitlab": "trigger: issues events, comments (the secret goes in \"Secret token\")"}


def _say(text: str, *, style: str | None = None, stderr: bool = False) -> None:
    Console(highlight=False, emoji=False, stderr=stderr).print(printable(text), style=style, markup=False,
                                                               soft_wrap=True)


def _fail(error: ErrandError) -> typer.Exit:
    _say(f"error: {error.message}", style="red", stderr=True)
    return typer.Exit(2 if isinstance(error, ConfigError) else 1)


def submit_forge_issue(service: TaskApi, text: str, *, repo: str, base: str, model: str | None,
                       attempts: int) -> Task:
    """``errand run --issue owner/name#42``: the issue and its whole thread, read from the forge."""
    from errand.forge.inbound.intake import submit_issue

    if not isinstance(service, TaskService):
        raise ConfigError("a forge issue is read by the errand that holds the token: run without --server, or let "
                          "the server's webhook pick the issue up", code="invalid_input")
    kind, ref = parse_issue(text)
    if ref.pull:
        raise ConfigError(f"{text} is a merge request: errand takes an issue (on a merge request errand opened, "
                          "comment @errand <ask>)", code="invalid_input")
    forge, _settings, _token = open_forge(kind)
    return submit_issue(service, LinkStore(service.engine), forge, ref, repo=repo, base=base, model=model,
                        attempts=attempts)


def _publisher(service: TaskService, kind: str = "github") -> Publisher:
    from errand.forge.outbound.publish import Publisher

    forge, settings, token = open_forge(kind)
    return Publisher(service, LinkStore(service.engine), forge, token, draft=settings.draft,
                     public_url=_public_url(), ci_fix_attempts=settings.ci_fix_attempts, pr=settings.pr)


def _public_url() -> str | None:
    import os

    return os.environ.get("ERRAND_PUBLIC_URL") or None


def publish_if_linked(service: TaskApi, task_id: str) -> None:
    """After ``errand accept``: push the branch and open the pull request of a task from a forge."""
    link = LinkStore(service.engine).get(task_id) if isinstance(service, TaskService) else None
    if link is None or not isinstance(service, TaskService):
        return
    try:
        published = _publisher(service, link.forge).publish(task_id)
    except ErrandError as error:
        _say(f"error: the pull request was not opened: {error.message}; retry with `errand forge pr {task_id}`",
             style="red", stderr=True)
        raise typer.Exit(1) from None
    verb = "opened" if published.opened else "updated"
    _say(f"pull request #{published.pull} {verb}: {published.url} (branch {published.branch})")


TaskId = Annotated[str, typer.Argument(metavar="ID", help="The task's id.")]


@forge_app.command("pr")
def pr(task_id: TaskId) -> None:
    """Push an accepted task's branch and open its pull request (safe to repeat: never a second one)."""
    try:
        with TaskStore.open() as store:
            published = _publisher(TaskService(store), _kind_of_task(store, task_id)).publish(task_id)
    except ErrandError as error:
        raise _fail(error) from None
    _say(f"pull request #{published.pull} {'opened' if published.opened else 'is there'}: {published.url}")


@forge_app.command("status")
def status(task_id: TaskId) -> None:
    """A task's pull request, the commit errand pushed, and the CI results on it."""
    try:
        with TaskStore.open() as store:
            service = TaskService(store)
            link = LinkStore(store.engine).get(task_id)
            if link is None or link.pull is None:
                raise ConfigError(f"task {task_id} has no pull request (`errand forge pr {task_id}` opens it)",
                                  code="no_pull")
            found = _publisher(service, link.forge).checks(task_id)
    except ErrandError as error:
        raise _fail(error) from None
    _say(f"pull request #{link.pull}: {link.pull_url} (branch {link.pull_branch}, pushed {(link.pushed or '')[:12]})")
    if not found:
        _say("CI: nothing reported on that commit yet")
    for check in found:
        _say(f"CI {check.name}: {check.state}" + (f" ({check.url})" if check.url else ""),
             style="green" if check.state == "success" else "red" if check.state in ("failure", "error") else None)


@forge_app.command("sync")
def sync() -> None:
    """One pass over the tasks linked to the forge: open the pull requests of accepted ones, push the
    rounds that review comments asked for. ``errand serve`` does this by itself."""
    from errand.forge.outbound.publish import catch_up

    try:
        with TaskStore.open() as store:
            links = LinkStore(store.engine)
            kinds = {link.forge for link in links.pending() + links.pushed_pulls()} or {"github"}
            for kind in sorted(kinds):
                for published in catch_up(_publisher(TaskService(store), kind)):
                    _say(f"{published.task_id}: pull request #{published.pull} at {published.commit[:12]}: "
                         f"{published.url}")
    except ErrandError as error:
        raise _fail(error) from None


def _kind_of_task(store: TaskStore, task_id: str) -> str:
    link = LinkStore(store.engine).get(task_id)
    return link.forge if link is not None else "github"


@forge_app.command("connect")
def connect(
    provider: Annotated[str, typer.Argument(metavar="PROVIDER", help="github, gitea (or forgejo) or gitlab.")],
    repo: Annotated[str, typer.Option("--repo", metavar="OWNER/NAME", help="The repository (GitLab: GROUP/PROJECT).")],
    path: Annotated[Path | None, typer.Option("--path", metavar="CLONE", help="Its local clone (tasks run on it "
                                                                                 "and accept into it).")] = None,
    url: Annotated[str, typer.Option("--url", metavar="URL", help="Where the forge reaches this errand serve.")] =
        "https://errand.example/",
    base_url: Annotated[str | None, typer.Option("--base-url", metavar="URL", help="The forge's own address, when "
                                                 "self-hosted (https://git.acme.test; GitHub Enterprise too).")] = None,
) -> None:
    """Check the token's access to the repository, say what is missing, and print the webhook to add."""
    try:
        kind = kind_of(provider)
        clone = _clone(path) if path is not None else None  # bad input is said before anything is written
        settings, new_base_url = _with_base_url(kind, base_url)
        forge, settings, _token = open_forge(kind, settings)
        scopes = forge.access(repo)
        # Only an address the token was checked against is kept, with the clone, in one write.
        _write_settings(kind, base_url=settings.base_url if new_base_url else None,
                        repo=(repo, clone) if clone is not None and repo not in settings.repos else None)
    except ErrandError as error:
        raise _fail(error) from None
    _say(f"token of @{scopes.login} on {settings.base_url}")
    missing = []
    wanted = _WRITE_SCOPES.get(kind)
    if wanted and scopes.scopes is not None and not set(wanted) & set(scopes.scopes):
        missing.append(f"{_SCOPE_HINT[kind]}, to push branches and open pull requests")
    if not scopes.can_push:
        missing.append(f"write access to {repo}")
    for what in missing:
        _say(f"missing: {what}", style="yellow")
    if clone is not None and repo in settings.repos:
        _say(f"{repo} is set up already in {settings_path()}")
    elif clone is None and repo not in settings.repos:
        _say(f"missing: a local clone; run again with --path CLONE (it goes into {settings_path()})", style="yellow")
    secret = settings.webhook_secret() or secrets.token_urlsafe(24)
    _say(f"webhook: payload URL {url.rstrip('/')}/api/forge/{kind}/webhook, {_EVENTS[kind]}")
    if settings.webhook_secret() is None:
        _say(f"secret: {secret}  (export {settings.webhook_secret_env}={secret} where `errand serve` runs)")
    raise typer.Exit(1 if missing else 0)


def _with_base_url(kind: str, base_url: str | None) -> tuple[ForgeSettings, bool]:
    """The kind's settings with ``--base-url`` in them, and whether the file lacks it (written once the
    token is checked against it); a file that sets another one refuses it."""
    from errand.forge.hosts.kinds import api_root

    settings = ForgeSettings.load(kind=kind)
    if base_url is None:
        return settings, False
    wanted = api_root(kind, base_url)
    if wanted == settings.base_url:
        return settings, False
    file = settings_path()
    written = _written_base_url(file, kind)
    if written is not None:
        raise ConfigError(f"{file} sets [{kind}] base_url = {written!r}: edit it there to use {wanted}",
                          code="invalid_input")
    return dataclasses.replace(settings, base_url=wanted), True


def _write_settings(kind: str, *, base_url: str | None, repo: tuple[str, Path] | None) -> None:
    """Add ``[kind] base_url`` and the repository's clone to forge.toml: under a lock on its directory,
    so two connects at once do not both add the table; values quoted as TOML strings; and the whole
    file read back before it replaces the old one, which stays as it was if anything is wrong."""
    if base_url is None and repo is None:
        return
    file = settings_path()
    file.parent.mkdir(parents=True, exist_ok=True)
    directory = os.open(file.parent, os.O_RDONLY)
    try:
        fcntl.flock(directory, fcntl.LOCK_EX)
        before = file.read_text(encoding="utf-8") if file.exists() else ""
        table = tomllib.loads(before).get(kind, {}) if before.strip() else {}
        if base_url is not None and "base_url" in table and table["base_url"] != base_url:
            raise ConfigError(f"{file} sets [{kind}] base_url = {table['base_url']!r} (written meanwhile): edit it "
                              f"there to use {base_url}", code="invalid_input")
        added = ""
        if base_url is not None and "base_url" not in table:
            added += f"\n[{kind}]\nbase_url = {_toml_string(base_url)}\n"
        if repo is not None and repo[0] not in table.get("repos", {}):
            added += f"\n[{kind}.repos.{_toml_string(repo[0])}]\npath = {_toml_string(str(repo[1]))}\n"
        after = before + added
        tomllib.loads(after)  # what is written reads back
        staged = file.with_name(f".{file.name}.{os.getpid()}")
        staged.write_text(after, encoding="utf-8")
        os.replace(staged, file)
    finally:
        os.close(directory)
    if base_url is not None:
        _say(f"[{kind}] base_url = {base_url} (written to {file})")
    if repo is not None:
        _say(f"{repo[0]} → {repo[1]} (written to {file})")


def _toml_string(value: str) -> str:
    """``value`` as a TOML basic string: JSON's escapes are TOML's, but for DEL, which TOML escapes too."""
    return json.dumps(value).replace("\x7f", "\\u007f")


def _clone(path: Path) -> Path:
    clone = path.expanduser().resolve()
    if not (clone / ".git").exists():
        raise ConfigError(f"{clone} is not a git clone", code="not_a_git_repo")
    return clone


def _written_base_url(file: Path, kind: str) -> str | None:
    """The ``[kind] base_url`` the file sets (an environment variable may set another for the run)."""
    if not file.exists():
        return None
    written = tomllib.loads(file.read_text(encoding="utf-8")).get(kind, {}).get("base_url")
    return str(written) if written is not None else None


def run_batch(service: TaskApi, query: str, *, clone: str, limit: int, base: str,
              model: str | None, attempts: int) -> None:
    """``errand run --issues QUERY``: a task per issue found, as one batch (``errand forge ls --batch``)."""
    from errand.forge.inbound.intake import submit_batch

    if not isinstance(service, TaskService):
        raise ConfigError("a backlog is read by the errand that holds the token: run without --server",
                          code="invalid_input")
    kind = _batch_kind(query, clone)
    forge, settings, _token = open_forge(kind)
    repo, rest = _batch_repo(settings, query, clone)
    batch = submit_batch(service, LinkStore(service.engine), forge, repo, rest, clone=clone, limit=limit,
                         base=base, model=model, attempts=attempts)
    for ref, task in batch.started:
        _say(f"{task.id} queued: #{ref.number} {task.title}")
    for ref, why in batch.skipped:
        _say(f"#{ref.number} left: {why}", style="dim")
    _say(f"batch {batch.id}: {len(batch.started)} task(s) started; follow it with `errand forge ls --batch {batch.id}` "
         f"or on errand serve's /forge/batches/{batch.id}")


def _batch_kind(query: str, clone: str) -> str:
    """The forge whose table lists the repository the batch searches (GitHub when none does)."""
    named = [term[5:] for term in query.split() if term.startswith("repo:")]
    where = Path(clone).expanduser().resolve()
    for kind in KINDS[1:]:
        repos = ForgeSettings.load(kind=kind).repos
        listed = named[0] in repos if named else any(r.path.expanduser().resolve() == where for r in repos.values())
        if listed:
            return kind
    return "github"


def _batch_repo(settings: ForgeSettings, query: str, clone: str) -> tuple[str, str]:
    """The repository a search names (``repo:OWNER/NAME``) or the one whose clone ``--repo`` is."""
    named = [term[5:] for term in query.split() if term.startswith("repo:")]
    rest = " ".join(term for term in query.split() if not term.startswith("repo:"))
    if len(named) == 1:
        return named[0], rest
    if named:
        raise ConfigError("a batch searches one repository: give one repo:OWNER/NAME", code="invalid_input")
    where = Path(clone).expanduser().resolve()
    for name, repo in settings.repos.items():
        if repo.path.expanduser().resolve() == where:
            return name, rest
    raise ConfigError(f"which repository? put repo:OWNER/NAME in the query, or set up {where} with `errand forge "
                      "connect github --repo OWNER/NAME --path CLONE`", code="invalid_input")


@forge_app.command("ls")
def ls(
    repo: Annotated[str | None, typer.Option("--repo", metavar="OWNER/NAME", help="Only this repository.")] = None,
    batch: Annotated[str | None, typer.Option("--batch", metavar="ID", help="Only this batch.")] = None,
    limit: Annotated[int, typer.Option("--limit", metavar="N", min=1, help="How many, newest first.")] = 50,
) -> None:
    """The tasks errand took from the forge: the issue, the task's stage, its pull request, CI on it."""
    from rich.table import Table

    from errand.forge.progress import counts, rows

    with TaskStore.open() as store:
        found = rows(store, LinkStore(store.engine).listed(repo=repo, batch=batch, limit=limit))
    table = Table("ISSUE", "TASK", "STAGE", "PR", "CI", "TITLE", box=None, pad_edge=False)
    for row in found:
        link = row.link
        table.add_row(printable(f"{link.repo}#{link.issue}" if link.issue else link.repo), row.task.id, row.stage,
                      f"#{link.pull}" if link.pull else "", row.ci, printable(row.task.title, lines=False))
    Console(highlight=False, emoji=False).print(table)
    _say(", ".join(f"{count} {stage}" for stage, count in counts(found).items()) or "no tasks from the forge yet")
