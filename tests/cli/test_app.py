"""The command line of ``errand sandbox`` and ``errand --version``, in-process through Typer's CliRunner and as a
real ``errand`` process."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner, Result

import forkserver
from errand import __version__
from errand.cli import app
from errand.errors import SandboxNotFound
from errand.sandbox import AsyncSandbox

_ID = re.compile(r"^sb-[a-z0-9]{10}$")

runner = CliRunner()


def cli(*args: str, input: str | None = None) -> Result:  # noqa: A002 - CliRunner's name
    return runner.invoke(app, list(args), input=input)


def errand(*args: str, input: str = "") -> subprocess.CompletedProcess[str]:  # noqa: A002
    # input="" gives the command a stdin that is a pipe at end of file, never a terminal.
    return forkserver.run(list(args), input=input, timeout=120)


def live_ids() -> set[str]:
    return {info.id for info in asyncio.run(AsyncSandbox.list())}


def terminate(sandbox_id: str) -> None:
    async def end() -> None:
        try:
            await (await AsyncSandbox.from_id(sandbox_id)).terminate()
        except SandboxNotFound:
            pass

    asyncio.run(end())


@pytest.fixture
def made() -> Iterator[list[str]]:
    """Ids of sandboxes a test created; whatever is still alive at the end is removed."""
    ids: list[str] = []
    yield ids
    for sandbox_id in ids:
        terminate(sandbox_id)


def create(made: list[str], *args: str) -> str:
    result = cli("sandbox", "create", "--timeout", "120", *args)
    assert result.exit_code == 0, result.output
    sandbox_id = result.stdout.strip()
    made.append(sandbox_id)
    assert _ID.match(sandbox_id), result.stdout
    return sandbox_id


def test_version() -> None:
    result = cli("--version")
    assert result.exit_code == 0
    assert result.stdout.strip() == f"errand {__version__}"


def test_a_mistyped_command_group_is_suggested_though_it_is_not_loaded_yet() -> None:
    # memory, eval, forge and config load when one of their commands runs (errand.cli.app):
    # a name close to one still gets it suggested, as every other command's does.
    for typed, suggested in (("memry", "'memory', 'retry'"), ("confg", "'config'"), ("forg", "'forge'")):
        said = errand(typed)
        assert said.returncode == 2
        assert f"No such command '{typed}'. Did you mean {suggested}?" in said.stderr


def test_the_command_groups_are_listed_in_one_order_whichever_loaded_first() -> None:
    from typer.main import get_command

    root = get_command(app)
    before = root.list_commands(typer.Context(root))
    root.get_command(typer.Context(root), "config")
    assert root.list_commands(typer.Context(root)) == before
    assert before[-5:] == ["worker", "memory", "eval", "forge", "config"]


def test_lifecycle_in_real_processes(made: list[str]) -> None:
    created = errand("sandbox", "create", "--timeout", "120")
    assert created.returncode == 0, created.stderr
    sandbox_id = created.stdout.strip()
    made.append(sandbox_id)
    assert _ID.match(sandbox_id), "not a TTY: stdout is the plain id, for scripts"

    ran = errand("sandbox", "exec", sandbox_id, "--", "sh", "-c", "echo out; echo err >&2; exit 7")
    assert (ran.returncode, ran.stdout, ran.stderr) == (7, "out\n", "err\n")
    piped = errand("sandbox", "exec", sandbox_id, "--", "tr", "a-z", "A-Z", input="piped in\n")
    assert (piped.returncode, piped.stdout) == (0, "PIPED IN\n")

    listed = json.loads(errand("sandbox", "ls", "--json").stdout)
    mine = [entry for entry in listed if entry["id"] == sandbox_id]
    assert len(mine) == 1 and mine[0]["owner_pid"] is None and mine[0]["backend"] == "namespace"
    table = errand("sandbox", "ls").stdout
    assert sandbox_id in table and "detached" in table

    removed = errand("sandbox", "rm", "--yes", sandbox_id)
    assert removed.returncode == 0 and f"removed {sandbox_id}" in removed.stdout
    assert sandbox_id not in {entry["id"] for entry in json.loads(errand("sandbox", "ls", "--json").stdout)}
    gone = errand("sandbox", "exec", sandbox_id, "--", "true")
    assert gone.returncode == 1
    assert gone.stderr.startswith(f"error: no live sandbox '{sandbox_id}'")


def test_exec_exit_codes(made: list[str]) -> None:
    sandbox_id = create(made)
    assert cli("sandbox", "exec", sandbox_id, "--", "sh", "-c", "exit 7").exit_code == 7
    assert cli("sandbox", "exec", sandbox_id, "--", "sh", "-c", "kill -TERM $$").exit_code == 128 + 15
    assert cli("sandbox", "exec", sandbox_id, "--", "no-such-command").exit_code == 127
    timed_out = cli("sandbox", "exec", sandbox_id, "--timeout", "0.3", "--", "sleep", "5")
    assert timed_out.exit_code == 124
    assert timed_out.stderr.startswith("error: command ran past its 0.3s timeout")


def test_exec_options_and_stdin(made: list[str]) -> None:
    sandbox_id = create(made)
    result = cli("sandbox", "exec", sandbox_id, "--cwd", "/tmp", "--env", "ANSWER=42", "--user", "nobody",
                 "--", "sh", "-c", "pwd; echo $ANSWER; id -un")
    assert (result.exit_code, result.stdout) == (0, "/tmp\n42\nnobody\n")
    echoed = cli("sandbox", "exec", sandbox_id, "--", "cat", input="line one\nline two\n")
    assert (echoed.exit_code, echoed.stdout) == (0, "line one\nline two\n")
    unknown = cli("sandbox", "exec", sandbox_id, "--user", "nosuchuser", "--", "true")
    assert unknown.exit_code == 2 and unknown.stderr.startswith("error: no user 'nosuchuser'")


def test_create_with_mounts_limits_and_env(made: list[str], tmp_path: Path) -> None:
    source = tmp_path / "source"
    source.mkdir()
    (source / "file.txt").write_text("from the host\n")
    shared = tmp_path / "shared"
    shared.mkdir()
    # Root inside is an unprivileged id on the host: a writable bind must be writable by it.
    shared.chmod(0o777)
    sandbox_id = create(made, "--copy", f"{source}:/data", "--bind", f"{source}:/ro",
                        "--bind", f"{shared}:/rw:rw", "--env", "GREETING=hi", "--cpus", "1",
                        "--memory", "256MiB", "--pids", "64", "--disk", "64MiB")

    def run(script: str) -> Result:
        return cli("sandbox", "exec", sandbox_id, "--", "sh", "-c", script)

    assert run("cat /data/file.txt").stdout == "from the host\n"
    assert run("echo changed > /data/file.txt").exit_code == 0
    assert (source / "file.txt").read_text() == "from the host\n", "a copy, not the host's file"
    assert run("touch /ro/new").exit_code != 0, "binds are read-only unless :rw"
    written = run("echo written > /rw/out")
    assert written.exit_code == 0, written.stderr
    assert (shared / "out").read_text() == "written\n"
    assert run("echo $GREETING").stdout == "hi\n"


def test_create_workdir(made: list[str]) -> None:
    sandbox_id = create(made, "--workdir", "/srv/app")
    assert cli("sandbox", "exec", sandbox_id, "--", "pwd").stdout == "/srv/app\n"


def test_create_with_an_allowlist(made: list[str]) -> None:
    # The detached sandbox's proxy is served by a supervisor process, so the allowlist holds
    # after this command returns; a name outside it is refused (403) before any DNS lookup.
    sandbox_id = create(made, "--allow", "allowed.errand.test")
    result = errand("sandbox", "exec", sandbox_id, "--", "sh", "-c",
                    'echo "$HTTPS_PROXY"; curl -sS -m 10 -o /dev/null -w "%{http_connect}" https://denied.errand.test/')
    assert result.stdout.splitlines() == ["http://127.0.0.1:3128", "403"], result


@pytest.mark.parametrize("args", [["--allow", "*.com"], ["--allow-cidr", "10.0.0.0/33"],
                                  ["--open-network", "--allow", "example.org"]])
def test_create_refuses_bad_policies(args: list[str]) -> None:
    before = live_ids()
    result = cli("sandbox", "create", *args)
    assert result.exit_code == 2
    assert "error:" in result.output
    assert live_ids() == before


def test_rm_unknown_id_fails_and_still_removes_the_others(made: list[str]) -> None:
    sandbox_id = create(made)
    result = cli("sandbox", "rm", "--yes", "sb-unknown0000", sandbox_id)
    assert result.exit_code == 1
    assert result.stderr.startswith("error: no live sandbox 'sb-unknown0000'")
    assert f"removed {sandbox_id}" in result.stdout
    assert sandbox_id not in live_ids()


@pytest.mark.parametrize("args", [
    ["--memory", "lots"], ["--disk", "-1"], ["--pids", "2"], ["--cpus", "0"], ["--copy", "no-colon"],
    ["--bind", "/tmp:/x:sometimes"], ["--env", "NO_VALUE"], ["--image", "ubuntu"], ["--timeout", "-5"],
    ["--copy", "/no/such/path:/x"],
])
def test_bad_input_is_one_error_line_and_creates_nothing(args: list[str]) -> None:
    before = live_ids()
    result = cli("sandbox", "create", *args)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert result.stdout == ""
    assert live_ids() == before


def test_bad_memory_in_a_real_process() -> None:
    before = live_ids()
    result = errand("sandbox", "create", "--memory", "lots")
    assert result.returncode == 2
    assert result.stderr == "error: memory must be a size such as '1GiB' or '512MiB', not 'lots'\n"
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert live_ids() == before


def test_gc_reaps_an_orphan() -> None:
    # A sandbox whose owner was SIGKILLed: its processes die with the owner, its record stays.
    owner = subprocess.Popen([sys.executable, "-c", (
        "import asyncio\nfrom errand.sandbox import AsyncSandbox\n"
        "async def main():\n    sandbox = await AsyncSandbox.create(timeout=60)\n"
        "    print(sandbox.id, flush=True)\n    await asyncio.sleep(60)\n"
        "asyncio.run(main())\n")], stdout=subprocess.PIPE, text=True)
    assert owner.stdout is not None
    sandbox_id = owner.stdout.readline().strip()
    owner.kill()
    owner.wait()
    assert _ID.match(sandbox_id), "the owner process failed to create its sandbox"
    try:
        deadline = time.monotonic() + 10
        while sandbox_id in live_ids() and time.monotonic() < deadline:
            time.sleep(0.05)
        result = cli("sandbox", "gc")
        assert result.exit_code == 0, result.output
        assert f"removed sandbox {sandbox_id}" in result.stdout
        assert not (Path(os.environ["ERRAND_RUNTIME_DIR"]) / sandbox_id).exists()
    finally:
        terminate(sandbox_id)
