"""``errand memory``: see, add, correct and remove what errand remembers about a project.

Registered in :mod:`errand.cli` as ``app.add_typer(memory_app, name="memory")``.
The project is the git repository that holds ``--repo`` (default: the current
directory), scoped as :func:`~errand.memory.project_key` does; a directory in
no repository is refused rather than made a project of its own. The database
is the one every errand command uses — ``ERRAND_DATABASE_URL``, else errand's
home (``ERRAND_HOME``) — unless ``--database-url`` names another (``--db`` and
``ERRAND_DB`` are the old spellings; ``ERRAND_DB`` says so when it is read).
Errors print one ``error: …`` line and exit 2 for rejected input (a secret, a
bad kind, an illegal status change, no repository), 1 otherwise.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, TypeVar

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from errand._text import printable
from errand.errors import ConfigError, ErrandError
from errand.memory.errors import InvalidMemory, SecretRefused
from errand.memory.export import export_section
from errand.memory.ingest import sync_instructions
from errand.memory.records import Kind, Memory, Provenance, Status, project_key
from errand.memory.retrieve import retrieve
from errand.memory.rules import Activation
from errand.memory.store import MemoryStore
from errand.tasks.memory_export import export_task
from errand.tasks.store.tasks import TaskStore

__all__ = ["memory_app"]

T = TypeVar("T")

memory_app = typer.Typer(no_args_is_help=True, help="See and curate project memory.", rich_markup_mode=None)

DbOption = Annotated[str | None, typer.Option(
    "--database-url", "--db", metavar="URL",
    help="Database URL (default: $ERRAND_DATABASE_URL, else errand.db in errand's home).")]
RepoOption = Annotated[Path, typer.Option("--repo", metavar="PATH", help="The project's repository.")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")]
IdsArgument = Annotated[list[int], typer.Argument(help="Memory ids.")]


@contextmanager
def _store(db: str | None, *, embedder: bool = True) -> Iterator[MemoryStore]:
    with _errors():
        url = _database_url(db)
        with (MemoryStore.open(url) if embedder else MemoryStore.open(url, embedder=None)) as store:
            yield store


@contextmanager
def _errors() -> Iterator[None]:
    try:
        yield
    except ErrandError as error:
        Console(stderr=True).print(f"error: {printable(error.message)}", style="red", markup=False,
                                   highlight=False, soft_wrap=True)
        raise typer.Exit(2 if isinstance(error, ConfigError | InvalidMemory | SecretRefused) else 1) from None


def _database_url(given: str | None) -> str | None:
    """``--database-url``, else the variable every errand command reads (None: errand's default,
    which reads it), else the old ``ERRAND_DB`` with a note that it is going away."""
    if given or os.environ.get("ERRAND_DATABASE_URL", "").strip():
        return given or None
    old = os.environ.get("ERRAND_DB", "").strip()
    if old:
        Console(stderr=True).print("warning: ERRAND_DB is deprecated; set ERRAND_DATABASE_URL, which every "
                                   "errand command reads", style="yellow", markup=False, highlight=False)
        return old
    return None


def _project(repo: Path, *, hint: str = "") -> str:
    """The project of the git repository holding ``repo``; a directory in none is refused, not
    made a project nobody's tasks would ever read. Found by ``.git``, without running git."""
    with _errors():
        path = repo.expanduser().resolve()
        for directory in (path, *path.parents):
            if (directory / ".git").exists():
                return project_key(directory)
        raise ConfigError(f"{path} is not in a git repository; memories belong to a repository: run this inside "
                          f"one or pass --repo PATH{hint}", code="not_a_git_repo")


def _each(db: str | None, ids: list[int], change: Callable[[MemoryStore, int], Memory]) -> None:
    with _store(db) as store:
        for memory_id in ids:
            memory = change(store, memory_id)
            _print_record(memory)


def _line(value: object) -> str:
    """A memory's field as one line of a terminal: agents propose memories, so every control
    character is shown, never obeyed, and a newline cannot start a line of its own."""
    return printable(str(value), lines=False)


def _print_record(memory: Memory, note: str = "") -> None:
    print(f"{memory.id}\t{memory.status}\t{_line(memory.text)}{note}")


@memory_app.command("ls")
def ls(
    repo: RepoOption = Path("."), db: DbOption = None, as_json: JsonOption = False,
    status: Annotated[Status | None, typer.Option(help="Only memories in this status.")] = None,
    kind: Annotated[Kind | None, typer.Option(help="Only memories of this kind.")] = None,
    all_projects: Annotated[bool, typer.Option("--all", help="Every project's memories.")] = False,
    limit: Annotated[int, typer.Option(metavar="N", min=1, help="At most this many, newest first.")] = 100,
) -> None:
    """List memories, newest first, with where each came from."""
    project = None if all_projects else _project(repo, hint=" (--all lists every project's memories)")
    with _store(db, embedder=False) as store:
        found = store.list_memories(project, status=status, kind=kind, limit=limit)
    if as_json:
        print(json.dumps([memory.to_json() for memory in found], indent=2))
        return
    if not found:
        which = "" if status is None and kind is None else " that match"
        where = "any project" if project is None else project
        Console(stderr=True).print(f"no memories{which} for {printable(where, lines=False)} yet; `errand memory add "
                                   "TEXT` adds one, `errand memory sync` reads AGENTS.md and its kin",
                                   markup=False, highlight=False, soft_wrap=True)
        return
    table = Table("id", "status", "kind", "text", "source", "uses", box=None)
    for memory in found:  # Text cells: a memory's "[link=...]" is printed, never read as markup
        table.add_row(str(memory.id), memory.status.value, memory.kind.value, Text(_line(memory.text)),
                      Text(_line(memory.provenance.describe())), str(memory.use_count))
    Console().print(table)


@memory_app.command("show")
def show(memory_id: Annotated[int, typer.Argument(metavar="ID", help="Memory id.")], db: DbOption = None,
         as_json: JsonOption = False) -> None:
    """Show one memory in full: text, provenance, status, supersession, use."""
    with _store(db, embedder=False) as store:
        memory = store.get(memory_id)
    if as_json:
        print(json.dumps(memory.to_json(), indent=2))
        return
    data = memory.to_json()
    for key in ("id", "project", "kind", "status", "text", "source", "confidence", "evidence", "use_count",
                "supersedes", "superseded_by", "archived_reason", "citations"):
        if data[key] not in (None, []):
            print(f"{key:15} {_line(data[key])}")


@memory_app.command("add")
def add(
    text: Annotated[str, typer.Argument(metavar="TEXT", help="The memory: one self-contained statement.")],
    kind: Annotated[Kind, typer.Option(help="What sort of memory it is.")] = Kind.FACT,
    repo: RepoOption = Path("."), db: DbOption = None,
    proposed: Annotated[bool, typer.Option("--proposed", help="Add it as proposed, not active.")] = False,
    supersedes: Annotated[int | None, typer.Option(metavar="ID", help="The id of a memory this one replaces.")] = None,
    paths: Annotated[list[str] | None, typer.Option(
        "--path", metavar="GLOB", help="Scope it to these files (repeatable, e.g. 'src/api/**'): given to an agent "
        "when it opens one of them, not by similarity.")] = None,
) -> None:
    """Add a memory by hand (active unless --proposed); a near-duplicate is merged instead."""
    project = _project(repo)
    if any(not path.strip() or path.startswith("/") or ".." in path.split("/") or "," in path for path in paths or ()):
        raise typer.BadParameter("--path takes a glob relative to the repository, such as 'src/api/**' "
                                 "(no leading /, no .., no comma)")
    scope = Activation("globs", tuple(path.strip() for path in paths)).detail() if paths else None
    with _store(db) as store:
        memory = store.add(project, text, kind=kind, provenance=Provenance.person(scope),
                           status=Status.PROPOSED if proposed else Status.ACTIVE, supersedes=supersedes)
    _print_record(memory, " (merged into an existing memory)" if memory.evidence > 1 else "")


@memory_app.command("edit")
def edit(
    memory_id: Annotated[int, typer.Argument(metavar="ID", help="Memory id.")], db: DbOption = None,
    text: Annotated[str | None, typer.Option(metavar="TEXT", help="New text.")] = None,
    kind: Annotated[Kind | None, typer.Option(help="New kind.")] = None,
) -> None:
    """Correct a memory's text or kind."""
    if text is None and kind is None:
        raise typer.BadParameter("give --text or --kind (or both)")
    with _store(db) as store:
        memory = store.edit(memory_id, text=text, kind=kind)
    _print_record(memory)


@memory_app.command("rm")
def rm(ids: IdsArgument, db: DbOption = None,
       archive: Annotated[bool, typer.Option("--archive", help="Archive instead of deleting.")] = False) -> None:
    """Delete memories for good (or, with --archive, keep them but never give them to an agent)."""
    _each(db, ids, (lambda store, memory_id: store.archive(memory_id)) if archive else
          (lambda store, memory_id: store.remove(memory_id)))


@memory_app.command("approve")
def approve(ids: IdsArgument, db: DbOption = None) -> None:
    """Approve proposed memories: they become active and are given to agents."""
    _each(db, ids, lambda store, memory_id: store.approve(memory_id))


@memory_app.command("reject")
def reject(ids: IdsArgument, db: DbOption = None) -> None:
    """Reject proposed memories: archived, and the same proposal is never made active again."""
    _each(db, ids, lambda store, memory_id: store.reject(memory_id))


@memory_app.command("sync")
def sync(repo: RepoOption = Path("."), db: DbOption = None) -> None:
    """Read the repository's instruction files (AGENTS.md, CLAUDE.md, …) into memory, or bring them up to date."""
    project = _project(repo)
    with _store(db) as store:
        report = sync_instructions(store, project, Path(project))
    print(f"{len(report.files)} files: {len(report.added)} added, {len(report.kept)} unchanged, "
          f"{len(report.superseded)} superseded, {len(report.archived)} archived, {report.refused} refused")


@memory_app.command("backfill")
def backfill(repo: RepoOption = Path("."), db: DbOption = None,
             every: Annotated[bool, typer.Option("--all", help="Every project in the database.")] = False) -> None:
    """Embed what has no vector yet: memories stored before the embedder was configured, and the words
    of memories stored before word vectors existed (the fast query encoder needs them; minutes for a
    large store, with progress on stderr)."""
    with _store(db) as store:
        projects = store.projects() if every else [_project(repo)]
        for project in projects:
            def told(done: int, total: int, project: str = project) -> None:
                Console(stderr=True).print(f"{_line(project)}: {done:,} of {total:,} new words embedded",
                                           markup=False, highlight=False, soft_wrap=True)
            with _errors():
                count = store.backfill_vectors(project, progress=told)
            print(f"{_line(project)}: {count} {'memory' if count == 1 else 'memories'} embedded")


@memory_app.command("search")
def search(
    query: Annotated[str, typer.Argument(metavar="QUERY", help="What to recall.")], repo: RepoOption = Path("."),
    db: DbOption = None,
    k: Annotated[int, typer.Option("-k", metavar="N", help="How many.")] = 8, as_json: JsonOption = False,
) -> None:
    """Recall memories as an agent would be given them (stale citations flagged against --repo)."""
    project = _project(repo)
    with _store(db) as store:
        found = retrieve(store, project, query, k=k, repo_dir=Path(project))
    if as_json:
        print(json.dumps([{**item.memory.to_json(), "score": item.score, "stale": item.stale,
                           "stale_reasons": list(item.stale_reasons)} for item in found], indent=2))
        return
    for item in found:
        print(_line(item.render()))


@memory_app.command("export")
def export(
    repo: RepoOption = Path("."), db: DbOption = None,
    file: Annotated[str, typer.Option("--file", help="The instruction file to write the section into.")] = "AGENTS.md",
    base: Annotated[str, typer.Option("--base", metavar="REF", help="The commit the task's diff starts from.")]
    = "HEAD",
    only_print: Annotated[bool, typer.Option("--print", help="Only print the diff against the file as it is now.")]
    = False,
    write: Annotated[bool, typer.Option("--write", help="Write the file in place instead of making a task.")]
    = False,
) -> None:
    """Write the approved memories into a marked section of AGENTS.md, as a task to review like any other
    (`errand show`, `errand accept` lands it on a branch); --print shows the diff, --write writes the file."""
    if only_print or write:
        with _store(db, embedder=False) as store:
            new, diff = export_section(store, project_key(repo), repo, file)
        print(printable(diff) if diff else f"{file} already holds every approved memory", end="" if diff else "\n")
        if write and diff:
            (repo / file).write_text(new, encoding="utf-8")
        return
    project = Path(_project(repo))
    with _errors(), TaskStore.open(_database_url(db)) as tasks:
        task = export_task(tasks, MemoryStore(tasks.engine, embedder=None), project, file=file, base=base)
        run = tasks.runs(task.id)[0] if task is not None else None
    if task is None or run is None:
        print(f"{file} at {base} already holds every approved memory")
        return
    print(printable(run.outcome.patch if run.outcome else ""), end="")
    Console(stderr=True).print(f"task {task.id} is ready for review: `errand show {task.id}`; `errand accept "
                               f"{task.id}` commits it on {task.branch}", markup=False, highlight=False,
                               soft_wrap=True)
