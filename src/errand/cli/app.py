"""errand's command line: a thin face over the same sandbox API Python users call.

Every command runs the async API once through :func:`_run`, which turns an
:class:`~errand.ErrandError` into one red ``error: ...`` line and an exit code:
2 for input that was rejected before anything happened (``ConfigError``), 124
for a command that ran past ``--timeout`` (as ``timeout(1)`` does), 1 otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import difflib
import functools
import importlib
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Coroutine, Iterator, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Annotated, Any, TypeVar

import typer
import typer.main
from rich.console import Console
from rich.table import Table
from typer.core import TyperGroup

from errand import __version__, _startup
from errand._text import printable
from errand.cli import doctor as cli_doctor
from errand.cli import init as cli_init
from errand.cli import tasks as cli_tasks
from errand.cli.confirm import Yes, confirm
from errand.cli.worker import recover, worker_app
from errand.errors import ConfigError, ErrandError, ExecTimeout
from errand.eval import strip as eval_strip
from errand.repo import checkouts
from errand.sandbox.config import Mount, Resources
from errand.sandbox.network import Network
from errand.sandbox.secret import Secret

if TYPE_CHECKING:
    from errand.sandbox import AsyncProcess, AsyncSandbox, AsyncStream, GcReport, Image, SandboxInfo

# The sandbox itself (its backends, images and egress) loads in the commands that start or
# find one, as do the command groups below (their modules are imported when one of their
# commands runs, or --help lists them): `errand ls` needs none of them.

__all__ = ["app", "main"]

T = TypeVar("T")

EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_TIMEOUT = 124
EXIT_INTERRUPTED = 130
# Once a command has ended, output still in flight is collected for this long; a
# daemon it left behind may hold the pipes open forever (AsyncProcess.result does the same).
_DRAIN = 0.5

# Plain help, as git and pip print it (rich_markup_mode=None): Typer's panels put a type
# after every flag (`--json <bool>`), cut long option names at 80 columns, and read help
# text as markup, so `[models.NAME]` vanished from it.
# Command groups whose module is imported when one of their commands runs, or --help lists them.
_LAZY_GROUPS = {"memory": ("errand.cli.memory", "memory_app"), "eval": ("errand.cli.eval", "eval_app"),
                "forge": ("errand.cli.forge", "forge_app"), "config": ("errand.cli.config", "config_app")}


class _Commands(TyperGroup):
    """errand's commands, the groups of ``_LAZY_GROUPS`` among them, listed after the rest."""

    def list_commands(self, ctx: Any) -> list[str]:  # ctx: the vendored click Context typer names privately
        return [*(name for name in super().list_commands(ctx) if name not in _LAZY_GROUPS), *_LAZY_GROUPS]

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        # Typer suggests from the commands it holds: load a lazy group a mistyped name is close to.
        if args and args[0] not in self.commands:
            for name in difflib.get_close_matches(args[0], _LAZY_GROUPS):
                self.get_command(ctx, name)
        return super().resolve_command(ctx, args)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name in _LAZY_GROUPS and cmd_name not in self.commands:
            module, attribute = _LAZY_GROUPS[cmd_name]
            group = typer.main.get_group(getattr(importlib.import_module(module), attribute))
            group.name = cmd_name
            self.add_command(group)
        return super().get_command(ctx, cmd_name)


app = typer.Typer(name="errand", cls=_Commands, no_args_is_help=True, add_completion=False,
                  pretty_exceptions_show_locals=False, rich_markup_mode=None)
sandbox_app = typer.Typer(no_args_is_help=True, help="Create, use and remove sandboxes.", rich_markup_mode=None)
app.add_typer(sandbox_app, name="sandbox")
cli_tasks.register(app)
app.add_typer(worker_app, name="worker")
app.command("recover")(recover)
app.command("doctor")(cli_doctor.doctor)
app.command("init")(cli_init.init)


def main() -> None:
    app(prog_name="errand")


# ------------------------------------------------------------------ plumbing


def _stdout() -> Console:
    # Made per call, not at import: the streams (and whether they are terminals) are read now.
    return Console(emoji=False)


def _stderr() -> Console:
    return Console(stderr=True, emoji=False)


def _exit_code(error: ErrandError) -> int:
    if isinstance(error, ConfigError):
        return EXIT_USAGE
    if isinstance(error, ExecTimeout):
        return EXIT_TIMEOUT
    return EXIT_ERROR


def _report(error: ErrandError) -> None:
    _stderr().print(f"error: {printable(error.message)}", style="red", markup=False, highlight=False,
                    soft_wrap=True)


def _run(work: Coroutine[Any, Any, T]) -> T:
    """Run one piece of async API work; errand's errors end the command cleanly."""
    try:
        return asyncio.run(work)
    except ErrandError as error:
        _report(error)
        raise typer.Exit(_exit_code(error)) from None
    except KeyboardInterrupt:
        raise typer.Exit(EXIT_INTERRUPTED) from None


def _show_version(value: bool) -> None:
    if value:
        print(f"errand {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_show_version, is_eager=True,
                                          help="Print errand's version and exit.")] = False,
) -> None:
    """errand runs coding agents in the background, each in its own secure sandbox."""


# ----------------------------------------------------------- option parsing


def _image(name: str) -> Image:
    from errand.sandbox import Image

    if name == "base":
        return Image.base()
    if name == "debian" or name.startswith("debian:"):
        return Image.debian(name.partition(":")[2] or "bookworm")
    raise ConfigError(f"unknown image {name!r}; use 'base' or 'debian[:SUITE]'", code="invalid_image")


def _mount_spec(text: str, option: str, modes: tuple[str, ...] = ()) -> tuple[str, str, str | None]:
    """``SRC:DST`` (or ``SRC:DST:MODE`` where modes are allowed) → its parts."""
    parts = text.split(":")
    mode = parts.pop() if modes and len(parts) == 3 else None
    if len(parts) != 2 or not all(parts) or (mode is not None and mode not in modes):
        form = "SRC:DST" + (f"[:{'|'.join(modes)}]" if modes else "")
        raise ConfigError(f"{option} takes {form}, not {text!r}", code="invalid_mount")
    return parts[0], parts[1], mode


def _mounts(copies: Sequence[str], binds: Sequence[str]) -> list[Mount]:
    mounts = []
    for text in copies:
        source, target, _ = _mount_spec(text, "--copy")
        mounts.append(Mount.copy(source, target))
    for text in binds:
        source, target, mode = _mount_spec(text, "--bind", ("ro", "rw"))
        mounts.append(Mount.bind(source, target, read_only=mode != "rw"))
    return mounts


def _env(pairs: Sequence[str]) -> dict[str, str]:
    return _pairs(pairs, "--env", "NAME=VALUE", "invalid_env")


def _pairs(texts: Sequence[str], option: str, form: str, code: str) -> dict[str, str]:
    pairs = {}
    for text in texts:
        name, equals, value = text.partition("=")
        if not name or not equals:
            raise ConfigError(f"{option} takes {form}, not {text!r}", code=code)
        pairs[name] = value
    return pairs


def _resources(cpus: float | None, memory: str | None, pids: int | None, disk: str | None) -> Resources | None:
    given: dict[str, Any] = {name: value for name, value in (("cpus", cpus), ("memory", memory), ("pids", pids),
                                                               ("disk", disk)) if value is not None}
    return Resources(**given) if given else None


def _user(user: str | None) -> str | int | None:
    return int(user) if user is not None and user.isdigit() else user


# ------------------------------------------------------------------- create


@sandbox_app.command("create")
def create(
    image: Annotated[str, typer.Option(
        metavar="IMAGE", help="'base' (the host's programs, read-only) or 'debian[:SUITE]'.")] = "base",
    copy: Annotated[list[str] | None, typer.Option(
        "--copy", metavar="SRC:DST", help="Copy a host path in; the sandbox changes only its copy.")] = None,
    bind: Annotated[list[str] | None, typer.Option(
        "--bind", metavar="SRC:DST[:ro|rw]", help="Share a host path (read-only unless :rw).")] = None,
    cpus: Annotated[float | None, typer.Option(metavar="N", help="CPU share, e.g. 0.5 or 2.")] = None,
    memory: Annotated[str | None, typer.Option(metavar="SIZE", help="Memory limit, e.g. 1GiB (default 2GiB).")] = None,
    pids: Annotated[int | None, typer.Option(metavar="N", help="Most processes at once (default 1024).")] = None,
    disk: Annotated[str | None, typer.Option(
        metavar="SIZE", help="Size of what it may write, e.g. 2GiB (default 4GiB).")] = None,
    timeout: Annotated[float, typer.Option(
        metavar="SECONDS", help="Seconds until the sandbox ends; 0 for no limit.")] = 300,
    idle_timeout: Annotated[float, typer.Option(
        metavar="SECONDS", help="End after this many seconds without a command; 0 never.")] = 0,
    workdir: Annotated[str | None, typer.Option(metavar="DIR", help="Commands' default directory.")] = None,
    env: Annotated[list[str] | None, typer.Option(
        "--env", metavar="NAME=VALUE", help="An environment variable for every command.")] = None,
    label: Annotated[list[str] | None, typer.Option(
        "--label", metavar="KEY=VALUE", help="A label, shown by `errand sandbox ls`.")] = None,
    allow: Annotated[list[str] | None, typer.Option(
        "--allow", metavar="DOMAIN", help="Let it reach this domain ('*.example.org': subdomains).")] = None,
    allow_cidr: Annotated[list[str] | None, typer.Option(
        "--allow-cidr", metavar="CIDR", help="Let it reach this network.")] = None,
    open_network: Annotated[bool, typer.Option(
        "--open-network", help="Let it reach any public address (never private or loopback).")] = False,
    secret: Annotated[list[str] | None, typer.Option(
        "--secret", metavar="NAME:HOST[,HOST]",
        help="Your $NAME, swapped in by the egress proxy for these hosts only; the sandbox holds a placeholder.")
    ] = None,
) -> None:
    """Create a detached sandbox and print its id; it lives until its timeout or `errand sandbox rm`.

    Its network is loopback only unless --allow, --allow-cidr or --open-network say otherwise.
    """

    async def start() -> AsyncSandbox:
        from errand.sandbox import AsyncSandbox

        return await AsyncSandbox.create(
            _image(image), mounts=_mounts(copy or (), bind or ()), resources=_resources(cpus, memory, pids, disk),
            network=_network(allow or (), allow_cidr or (), open_network),
            timeout=timeout or None, idle_timeout=idle_timeout or None, workdir=workdir, env=_env(env or ()),
            labels=_pairs(label or (), "--label", "KEY=VALUE", "invalid_label"), detach=True,
            secrets=_secrets(secret or ()),
            log=lambda line: _stderr().print(printable(line), style="dim", markup=False, highlight=False))

    sandbox = _run(start())
    if sys.stdout.isatty():
        ends = f"ends in {timeout:g}s or on " if timeout else "ends on "
        _stdout().print(f"created [bold]{sandbox.id}[/] ({ends}`errand sandbox rm {sandbox.id}`)", highlight=False)
    else:
        print(sandbox.id)


def _secrets(texts: Sequence[str]) -> list[Secret]:
    """``--secret NAME:HOST[,HOST]``, each value read from this process's $NAME (a value on the
    command line would be in every process list)."""
    declared = []
    for text in texts:
        name, colon, hosts = text.partition(":")
        if not name or not colon or not hosts:
            raise ConfigError(f"--secret takes NAME:HOST[,HOST], not {text!r}", code="invalid_secret")
        value = os.environ.get(name)
        if not value:
            raise ConfigError(f"--secret {name}: ${name} is not set here; set it to the value to declare",
                              code="invalid_secret")
        declared.append(Secret(name, value, hosts=tuple(host.strip() for host in hosts.split(","))))
    return declared


def _network(domains: Sequence[str], cidrs: Sequence[str], open_network: bool) -> Network:
    if open_network:
        if domains or cidrs:
            raise ConfigError("--open-network already allows every public address; drop --allow",
                              code="invalid_network")
        return Network.open()
    for domain in domains:
        if domain.strip().lower().rstrip(".") in ("*", "*.*"):
            raise ConfigError(f"--allow {domain!r} would allow every domain; --open-network lets it reach any "
                              "public address (never private or loopback)", code="overbroad_domain")
    try:
        return Network.allow(*domains, cidrs=cidrs) if domains or cidrs else Network.none()
    except ConfigError as error:
        if error.code != "overbroad_cidr":
            raise
        # The API's sentence names Network.open(); on the command line it is a flag.
        reason = error.message.partition(";")[0]
        raise ConfigError(f"--allow-cidr: {reason}; name narrower networks, or use --open-network for any public "
                          "address", code=error.code) from None


# --------------------------------------------------------------------- exec


@sandbox_app.command("exec")
def exec_(
    sandbox_id: Annotated[str, typer.Argument(metavar="ID", help="The sandbox's id.")],
    command: Annotated[list[str], typer.Argument(metavar="CMD", help="The command and its arguments, after --.")],
    cwd: Annotated[str | None, typer.Option(
        metavar="DIR", help="Directory to run in (default: the sandbox's workdir).")] = None,
    env: Annotated[list[str] | None, typer.Option(
        "--env", metavar="NAME=VALUE", help="An environment variable for this command.")] = None,
    user: Annotated[str | None, typer.Option(
        metavar="USER", help="User name or uid inside the sandbox (default root).")] = None,
    timeout: Annotated[float | None, typer.Option(
        metavar="SECONDS", help="Kill the command after this many seconds.")] = None,
) -> None:
    """Run a command in a sandbox: `errand sandbox exec ID -- CMD [ARGS]...`.

    Output streams live; stdin is forwarded unless it is a terminal; errand exits with
    the command's exit code (128+N when signal N ended it, 124 when --timeout did).
    """
    from errand.sandbox import AsyncSandbox

    async def run() -> int:
        sandbox = await AsyncSandbox.from_id(sandbox_id)
        process = await sandbox.exec(*command, cwd=cwd, env=_env(env or ()), user=_user(user), timeout=timeout,
                                     text=False)
        return await _attach(process)

    raise typer.Exit(_run(run()))


async def _attach(process: AsyncProcess) -> int:
    """Wire a running command to this terminal; its exit code, or 128+signal."""
    pumps = [asyncio.ensure_future(_pump(process.stdout, sys.stdout, process)),
             asyncio.ensure_future(_pump(process.stderr, sys.stderr, process))]
    await _feed_stdin(process)
    try:
        with _forward_signals(process):
            code = await process.wait()
    finally:
        await asyncio.wait(pumps, timeout=_DRAIN)
        for pump in pumps:
            pump.cancel()
    return 128 + process.signal if process.signal else code


async def _pump(stream: AsyncStream, target: IO[str], process: AsyncProcess) -> None:
    target.flush()
    output = target.buffer  # type: ignore[attr-defined]
    # Chunks, not lines: output without newlines (a prompt, a progress bar, binary data) must
    # show at once and pass whole; line iteration holds it back and drops lines over its limit.
    # AsyncStream has no public chunked read yet, so this reads its reader directly.
    while chunk := await stream._reader.read(65536):
        try:
            output.write(chunk)
            output.flush()
        except BrokenPipeError:
            # Our reader went away (`errand sandbox exec ... | head`): end the command as a pipe would.
            await process.kill(signal.SIGPIPE)
            return


async def _feed_stdin(process: AsyncProcess) -> None:
    """Forward our stdin unless it is a terminal (commands are not interactive)."""
    source = sys.stdin
    if source is None or source.isatty():
        await process.stdin.close()
        return
    loop = asyncio.get_running_loop()
    # A blocking read in a daemon thread: stdin may be a pipe, a file or a test's buffer, and a
    # reader still waiting when the command ends must not keep errand alive. It reads the file
    # descriptor itself where there is one: a thread blocked inside sys.stdin's buffered reader
    # holds its lock, and the interpreter aborts at exit when it cannot take that lock.
    try:
        reader: int | IO[bytes] = source.fileno()
    except (AttributeError, OSError, ValueError):
        reader = source.buffer
    threading.Thread(target=_copy_stdin, args=(reader, process, loop), daemon=True, name="errand-stdin").start()


def _copy_stdin(source: int | IO[bytes], process: AsyncProcess, loop: asyncio.AbstractEventLoop) -> None:
    def deliver(work: Coroutine[Any, Any, None]) -> None:
        try:
            future = asyncio.run_coroutine_threadsafe(work, loop)
        except RuntimeError:  # the loop has closed
            work.close()
            raise
        future.result()  # waits: backpressure from the command

    try:
        read = functools.partial(os.read, source) if isinstance(source, int) else getattr(source, "read1", source.read)
        while chunk := read(65536):
            deliver(process.stdin.write(chunk))
        deliver(process.stdin.close())
    except (OSError, RuntimeError):
        pass  # the command ended (its stdin is closed) or errand is exiting


@contextlib.contextmanager
def _forward_signals(process: AsyncProcess) -> Iterator[None]:
    """Ctrl-C and friends go to the command; a second Ctrl-C kills it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    loop = asyncio.get_running_loop()
    interrupts = 0
    kills: set[asyncio.Future[None]] = set()

    def forward(signum: int) -> None:
        nonlocal interrupts
        interrupts += signum == signal.SIGINT
        kill = asyncio.ensure_future(process.kill(signal.SIGKILL if interrupts > 1 else signum))
        kills.add(kill)
        kill.add_done_callback(kills.discard)

    forwarded = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    for signum in forwarded:
        loop.add_signal_handler(signum, forward, signum)
    try:
        yield
    finally:
        for signum in forwarded:
            loop.remove_signal_handler(signum)


# -------------------------------------------------------------- ls, rm, gc


@sandbox_app.command("ls")
def ls(as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False) -> None:
    """List this errand home's live sandboxes."""
    from errand.sandbox import AsyncSandbox

    sandboxes = _run(AsyncSandbox.list())
    if as_json:
        print(json.dumps([dataclasses.asdict(info) for info in sandboxes], indent=2))
    elif not sandboxes:
        _stderr().print("no live sandboxes", style="dim")
    else:
        _stdout().print(_table(sandboxes))


def _table(sandboxes: Sequence[SandboxInfo]) -> Table:
    table = Table(box=None, header_style="bold")
    table.add_column("ID", no_wrap=True)
    table.add_column("BACKEND")
    table.add_column("AGE", justify="right")
    table.add_column("OWNER")
    table.add_column("IMAGE", overflow="fold")
    table.add_column("LABELS", overflow="fold")
    now = time.time()
    for info in sandboxes:
        owner = "detached" if info.owner_pid is None else f"pid {info.owner_pid}"
        labels = " ".join(f"{key}={value}" for key, value in info.labels.items())
        table.add_row(info.id, info.backend, cli_tasks.age(now - info.created_at), owner,
                      cli_tasks.shown(info.image, lines=False), labels)
    return table


@sandbox_app.command("rm")
def rm(sandbox_ids: Annotated[list[str], typer.Argument(metavar="ID", help="Sandboxes to end.")],
       yes: Yes = False) -> None:
    """End sandboxes: kill every process, remove what they left on the host. Asks first (--yes does not);
    a task whose sandbox this ends is told a person ended it."""
    from errand.sandbox import AsyncSandbox

    async def remove_all() -> int:
        failures, found = 0, []
        for sandbox_id in sandbox_ids:
            try:
                found.append(await AsyncSandbox.from_id(sandbox_id))
            except ErrandError as error:
                _report(error)
                failures += 1
        if found:
            listed = {info.id: info for info in await AsyncSandbox.list()}
            confirm(f"end {', '.join(s.id for s in found)}",
                    [_ending(listed[s.id]) for s in found if s.id in listed], yes=yes)
        for sandbox in found:
            try:
                await sandbox.terminate()
            except ErrandError as error:
                _report(error)
                failures += 1
            else:
                _stdout().print(f"removed {sandbox.id}", highlight=False)
        return failures

    if _run(remove_all()):
        raise typer.Exit(EXIT_ERROR)


def _ending(info: SandboxInfo) -> str:
    task = info.labels.get("task")
    what = f"task {task}'s sandbox (its run fails, saying a person ended it)" if task else "a sandbox"
    return f"{info.id}: {what}, every process in it killed"


@sandbox_app.command("gc")
def gc() -> None:
    """Reap orphans: sandboxes whose owner or own processes are gone, and what they left behind."""
    _print_removed(_collect_sandboxes())


@app.command("gc")
def collect_garbage(
    unused_days: Annotated[float, typer.Option("--unused-days", metavar="DAYS", min=0,
                                               help="Remove pristine checkouts no task (and stripped "
                                                    "sources no eval) has used for this many days.")]
    = checkouts.UNUSED_FOR / 86_400,
) -> None:
    """Reclaim disk: orphaned sandboxes and their leftovers, the working copies a dead worker left
    of runs that ended, pristine checkouts no task uses, and the stripped copies of repositories
    no evaluation has used."""
    removed = _collect_sandboxes() + [("working copy of run", name) for name in _reap_work()]
    removed += [("checkout", name) for name in checkouts.prune(unused_days * 86_400)]
    _print_removed(removed + [("eval source", name) for name in eval_strip.prune(unused_days * 86_400)])


def _reap_work() -> list[str]:
    """The working copies this home's dead worker left (its own store only: none when it has no work)."""
    from errand.tasks.engines.reconcile import reap_work
    from errand.tasks.round import steps
    from errand.tasks.store.tasks import TaskStore

    if not steps.work_runs():
        return []
    try:
        with TaskStore.open() as store:
            return reap_work(store)
    except ErrandError as error:
        _report(error)
        return []


def _collect_sandboxes() -> list[tuple[str, str]]:
    async def collect() -> GcReport:
        from errand.sandbox import collect_garbage

        return await asyncio.to_thread(collect_garbage)

    report = _run(collect())
    return [(what, name) for what, names in (("sandbox", report.sandboxes), ("cgroup", report.cgroups),
                                             ("scratch", report.scratch), ("loop device", report.loop_devices))
            for name in names]


def _print_removed(removed: list[tuple[str, str]]) -> None:
    console = _stdout()
    for what, name in removed:
        console.print(f"removed {what} {name}", highlight=False)
    if not removed:
        console.print("nothing to collect", style="dim")


# --------------------------------------------------------------------- demo


@app.command()
def demo(
    model: Annotated[str | None, typer.Option(
        "--model", metavar="MODEL", help="provider:model (default: $ERRAND_MODEL, else errand's scripted "
                                         "demo model).")] = None,
) -> None:
    """errand's main job, for real: an agent fixes a failing test in a sample repo; you see the diff,
    the evidence, and the accept."""
    from errand.cli import demo as task_demo  # the engine, its gateway and httpx only for the demo

    _run(task_demo.run(_stdout(), model))


@app.command()
def serve(
    host: Annotated[str, typer.Option(
        metavar="ADDRESS", help="Address to bind; beyond loopback a token is required.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(metavar="PORT", help="Port to listen on.")] = 8470,
    token: Annotated[str | None, typer.Option(metavar="TOKEN", envvar="ERRAND_TOKEN", show_envvar=True,
                                              help="The token API calls and the web login need.")] = None,
    concurrency: Annotated[int, typer.Option(metavar="N", min=1, help="Tasks the built-in engine runs at once.")] = 2,
    engine: Annotated[str, typer.Option("--engine", metavar="ENGINE", envvar="ERRAND_ENGINE", help=(
        "What runs queued tasks: local (in this process) or temporal (workers of a Temporal service)."))] = "local",
    no_engine: Annotated[bool, typer.Option("--no-engine", help="Run no tasks here (another process does).")] = False,
    temporal: Annotated[str | None, typer.Option("--temporal", metavar="ADDRESS", envvar="ERRAND_TEMPORAL",
                                                 help="The Temporal service, host:port (--engine temporal).")] = None,
    repo_root: Annotated[list[Path] | None, typer.Option(
        "--repo-root", metavar="DIR", help="Only serve repositories inside this directory (repeatable).")] = None,
    allow_scripted_models: Annotated[bool, typer.Option(
        "--allow-scripted-models", help="Let callers use scripted models (they name a file on this machine).")] = False,
    log_level: Annotated[str, typer.Option(metavar="LEVEL", help="debug, info, warning or error.")] = "info",
    eval_runs: Annotated[Path | None, typer.Option("--eval-runs", metavar="DIR", envvar="ERRAND_EVAL_RUNS",
                                                   help="The evaluation runs the /eval pages show.")] = None,
) -> None:
    """The HTTP API, live task events and the web review UI; runs queued tasks too."""
    with _startup.imports():
        from errand.server.config import ServerConfig
        from errand.server.serve import bind
        from errand.server.serve import serve as serve_forever

    try:
        config = ServerConfig(host=host, port=port, token=token or None, concurrency=concurrency,
                              run_engine=not no_engine, engine=engine, temporal=temporal,
                              repo_roots=tuple(repo_root or ()), allow_scripted_models=allow_scripted_models,
                              eval_runs=eval_runs)
        listening = bind(config.host, config.port)  # a taken port is said before anything is touched
        _wait_for_the_store()
        serve_forever(config, log_level=log_level, listening=listening)
    except ErrandError as error:
        _report(error)
        raise typer.Exit(_exit_code(error)) from None


def _wait_for_the_store() -> None:
    """The store answers (and has errand's schema) before the server starts: a database started
    after errand, or restarting, is waited for up to ``ERRAND_STORE_RETRY_SECONDS``, each try said
    on stderr; then :class:`~errand.database.StoreUnreachable` says what is wrong in a line."""
    from errand.database import store_retry_from_environment
    from errand.tasks.store.tasks import TaskStore

    TaskStore.open(patience=store_retry_from_environment()).close()


@app.command("tour")
def tour_() -> None:
    """A narrated tour of errand's sandbox API, run for real (a few seconds)."""
    from errand.cli import tour

    _run(tour.run(_stdout()))

