"""``errand tour``: a narrated tour of the sandbox API, run for real in a few seconds.

Each step prints the Python it runs, then what happened. Everything it makes
(two sandboxes, a sample directory) is gone when it returns, even on failure.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.text import Text

from errand.sandbox import AsyncSandbox, Image, Mount, Network, Resources

__all__ = ["run"]

_TICKS = "for i in 1 2 3 4 5; do echo \"tick $i\"; sleep 0.15; done"
_CONNECT = """\
import socket
try:
    socket.create_connection(("192.0.2.1", 443), timeout=2)
    print("connected")
except OSError as error:
    print(error)
    raise SystemExit(1)
"""


async def run(console: Console) -> None:
    """The whole tour."""
    with tempfile.TemporaryDirectory(prefix="errand-demo-") as scratch:
        sample = _sample(Path(scratch))
        async with contextlib.AsyncExitStack() as cleanup:
            sandbox = await _create(console, sample)
            cleanup.push_async_callback(sandbox.terminate)
            await _stream(console, sandbox)
            await _files(console, sandbox)
            fork = await _fork(console, sandbox)
            cleanup.push_async_callback(fork.terminate)
            await _containment(console, sandbox)
            await _teardown(console, sandbox, fork)
    console.print()
    console.print("[bold green]done.[/] Both sandboxes and the sample directory are gone; "
                  "the snapshot's layer stays in errand's image store.")


def _sample(root: Path) -> Path:
    sample = root / "project"
    (sample / "src").mkdir(parents=True)
    (sample / "README.md").write_text("# sample project\n")
    (sample / "src" / "hello.py").write_text('print("hello from the sandbox")\n')
    return sample


# -------------------------------------------------------------------- steps


async def _create(console: Console, sample: Path) -> AsyncSandbox:
    _step(console, 1, "create: image, mounts, limits and network, all declared up front")
    _code(console, f"""\
sandbox = await AsyncSandbox.create(
    Image.base(),
    mounts=[Mount.copy("{sample}", "/work")],
    resources=Resources(cpus=1, memory="128MiB", pids=64, disk="64MiB"),
    network=Network.none(),
    timeout=60,
)""")
    started = time.perf_counter()
    sandbox = await AsyncSandbox.create(
        Image.base(), mounts=[Mount.copy(sample, "/work")],
        resources=Resources(cpus=1, memory="128MiB", pids=64, disk="64MiB"),
        network=Network.none(), timeout=60)
    _fact(console, f"created {sandbox.id} in {time.perf_counter() - started:.2f}s")
    return sandbox


async def _stream(console: Console, sandbox: AsyncSandbox) -> None:
    _step(console, 2, "exec: output streams live, line by line")
    _code(console, f"process = await sandbox.exec(\"sh\", \"-c\", {_TICKS!r})\n"
                   "async for line in process.stdout: ...")
    started = time.perf_counter()
    process = await sandbox.exec("sh", "-c", _TICKS)
    async for line in process.stdout:
        _output(console, f"+{time.perf_counter() - started:.2f}s  {line!s}".rstrip())
    _fact(console, f"exit code {await process.wait()}")
    _code(console, 'await sandbox.run("python3", "/work/src/hello.py")  # the copied-in sample')
    result = await sandbox.run("python3", "/work/src/hello.py")
    _output(console, result.stdout or result.stderr)


async def _files(console: Console, sandbox: AsyncSandbox) -> None:
    _step(console, 3, "files: write, read, list, remove")
    _code(console, 'await sandbox.files.write("/work/notes.txt", "remember: tests live in tests/\\n")')
    await sandbox.files.write("/work/notes.txt", "remember: tests live in tests/\n")
    _code(console, 'await sandbox.files.read_text("/work/notes.txt")')
    _output(console, await sandbox.files.read_text("/work/notes.txt"))
    _code(console, 'await sandbox.files.list("/work")')
    for info in await sandbox.files.list("/work"):
        _output(console, f"{info.type:<9} {info.size:>5}  {info.name}")
    _code(console, 'await sandbox.files.write("/tmp/scratch", "x"); await sandbox.files.remove("/tmp/scratch")')
    await sandbox.files.write("/tmp/scratch", "x")
    await sandbox.files.remove("/tmp/scratch")
    _fact(console, f"/tmp/scratch exists afterwards: {await sandbox.files.exists('/tmp/scratch')}")


async def _fork(console: Console, sandbox: AsyncSandbox) -> AsyncSandbox:
    _step(console, 4, "snapshot and fork: a sandbox's filesystem becomes an image")
    _code(console, "image = await sandbox.snapshot()\nfork = await AsyncSandbox.create(image, network=Network.none())")
    started = time.perf_counter()
    image = await sandbox.snapshot()
    fork = await AsyncSandbox.create(image, network=Network.none(), timeout=60)
    _fact(console, f"snapshot + fork {fork.id} in {time.perf_counter() - started:.2f}s")
    _code(console, 'await fork.files.read_text("/work/notes.txt")')
    _output(console, await fork.files.read_text("/work/notes.txt"))
    await fork.files.write("/work/fork-only.txt", "mine\n")
    seen = await sandbox.files.exists("/work/fork-only.txt")
    _fact(console, f"the fork wrote /work/fork-only.txt; the original sees it: {seen}")
    return fork


async def _containment(console: Console, sandbox: AsyncSandbox) -> None:
    _step(console, 5, "containment: what the code inside can and cannot do")
    outputs = []
    for command in (["id"], ["hostname"], ["cat", "/proc/self/uid_map"], ["ls", "/"]):
        _code(console, f"await sandbox.run({', '.join(map(repr, command))})")
        result = await sandbox.run(*command)
        outputs.append(" ".join((result.stdout or result.stderr).split()))
        _output(console, outputs[-1])
    host_uid = [*outputs[2].split(), "?", "?"][1]
    _fact(console, f"root inside is host uid {host_uid}, which owns nothing on the host; "
                   "the host's / is not there, only the image and /work")
    _code(console, 'await sandbox.run("python3", "-c", "socket.create_connection((\'192.0.2.1\', 443))")')
    result = await sandbox.run("python3", "-c", _CONNECT)
    verdict = "no network" if result.exit_code == 1 else "UNEXPECTED"
    _fact(console, f"connect out → {(result.stdout or result.stderr).strip()} ({verdict}: Network.none())")
    _code(console, 'await sandbox.run("python3", "-c", "x = b\'x\' * (256 * 2**20)")  # 256 MiB > 128MiB')
    result = await sandbox.run("python3", "-c", "x = b'x' * (256 * 2**20)")
    outcome = f"killed by signal {result.signal}" if result.signal else f"exit code {result.exit_code}"
    _fact(console, f"allocating past the memory limit → {outcome}")


async def _teardown(console: Console, sandbox: AsyncSandbox, fork: AsyncSandbox) -> None:
    _step(console, 6, "teardown: nothing left behind")
    _code(console, "await sandbox.terminate(); await fork.terminate()\nawait AsyncSandbox.list()")
    started = time.perf_counter()
    await sandbox.terminate()
    await fork.terminate()
    live = {info.id for info in await AsyncSandbox.list()}
    elapsed = time.perf_counter() - started
    for ended in (sandbox, fork):
        state = "STILL LISTED" if ended.id in live else "not listed"
        _fact(console, f"{ended.id}: {state} (alive={ended.alive})")
    _fact(console, f"terminated both in {elapsed:.2f}s")


# ---------------------------------------------------------------- narration


def _step(console: Console, number: int, title: str) -> None:
    console.print()
    console.rule(f"[bold cyan]{number}. {title}", align="left")


def _code(console: Console, code: str) -> None:
    from rich.syntax import Syntax  # Pygments only for the tour, not for every command

    highlighted = Syntax(code, "python", theme="ansi_dark").highlight(code)
    highlighted.rstrip()
    for line in highlighted.split("\n"):
        console.print(Text("  ") + line)


def _output(console: Console, text: str) -> None:
    for line in text.rstrip("\n").splitlines() or [""]:
        console.print(Text.assemble(("    │ ", "dim"), line))


def _fact(console: Console, text: str) -> None:
    console.print(Text.assemble(("  → ", "green"), text))
