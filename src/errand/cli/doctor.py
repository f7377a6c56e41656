"""``errand doctor``: can this machine run errand, and can it reach the team's deployment?

Each check is a small function that returns a :class:`Finding` — ``ok``, ``warn`` (errand
works, with less: no gVisor tier, little disk) or ``fail`` (errand cannot do that part of its
work) — with what was found and, when it is not ok, what to do. The machine's checks always
run; the deployment's run for what is named: a database URL (reachable, migrated to the
head errand knows), a Temporal address (its health check answers), a server (``/readyz``).
The command exits 1 when any check fails, so a provisioning script can gate on it.
"""

from __future__ import annotations

import asyncio
import enum
import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from errand import _settings
from errand._text import printable

__all__ = ["Finding", "Status", "deployment_checks", "doctor", "machine_checks"]

GIB = 1024**3
#: Below this much free disk under the errand home setup layers and working copies fail.
DISK_FAIL = 1 * GIB
DISK_WARN = 5 * GIB
PROBE_TIMEOUT = 5.0
#: What bubblewrap must be able to do for errand: every namespace, a root of read-only binds.
BWRAP_PROBE = ("--unshare-all", "--die-with-parent", "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin",
               "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64", "--proc", "/proc",
               "--dev", "/dev", "--tmpfs", "/tmp", "/usr/bin/true")


class Status(enum.StrEnum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"


@dataclass(frozen=True)
class Finding:
    name: str
    status: Status
    detail: str
    fix: str = ""


def machine_checks(*, port: int) -> list[Finding]:
    return [_guarded(name, check) for name, check in (
        ("bubblewrap", _bubblewrap), ("user namespaces", _user_namespaces), ("overlayfs", _overlayfs),
        ("cgroups", _cgroups), ("gVisor (runsc)", _runsc), ("git", _git), ("disk", _disk),
        ("port", lambda: _port(port)))]


def deployment_checks(*, database_url: str | None, temporal: str | None, server: str | None) -> list[Finding]:
    checks: list[tuple[str, Callable[[], Finding]]] = []
    if database_url:
        checks.append(("database", lambda: _database(database_url)))
    if temporal:
        checks.append(("temporal", lambda: _temporal(temporal)))
    if server:
        checks.append(("server", lambda: _server(server)))
    return [_guarded(name, check) for name, check in checks]


def _guarded(name: str, check: Callable[[], Finding]) -> Finding:
    try:
        return check()
    except Exception as error:  # noqa: BLE001 - a check that breaks is a finding, not a crash
        return Finding(name, Status.FAIL, f"the check itself failed: {type(error).__name__}: {error}")


# ------------------------------------------------------------------ the machine


def _bubblewrap() -> Finding:
    path = shutil.which("bwrap")
    if path is None:
        return Finding("bubblewrap", Status.FAIL, "bwrap is not installed",
                       "install the `bubblewrap` package (./scripts/setup does)")
    version = _output([path, "--version"]).strip()
    probe = subprocess.run([path, *BWRAP_PROBE], capture_output=True, text=True, timeout=PROBE_TIMEOUT)
    if probe.returncode != 0:
        return Finding("bubblewrap", Status.FAIL, f"{version} cannot start a sandbox: {_last_line(probe.stderr)}",
                       "errand runs sandboxes as root; check user namespaces and seccomp policy (below)")
    return Finding("bubblewrap", Status.OK, f"{version}, a sandbox with every namespace starts")


def _user_namespaces() -> Finding:
    limit = _read_int("/proc/sys/user/max_user_namespaces")
    if limit == 0:
        return Finding("user namespaces", Status.FAIL, "user.max_user_namespaces is 0",
                       "sysctl -w user.max_user_namespaces=15000")
    clone = _read_int("/proc/sys/kernel/unprivileged_userns_clone")
    detail = f"max {limit}" if limit is not None else "enabled"
    if clone == 0 and os.geteuid() != 0:
        return Finding("user namespaces", Status.FAIL, f"{detail}, but unprivileged clone is off",
                       "run errand as root, or sysctl -w kernel.unprivileged_userns_clone=1")
    return Finding("user namespaces", Status.OK, detail)


def _overlayfs() -> Finding:
    filesystems = Path("/proc/filesystems").read_text()
    if any(line.split()[-1] == "overlay" for line in filesystems.splitlines() if line.strip()):
        return Finding("overlayfs", Status.OK, "the kernel has overlay")
    modules = Path("/lib/modules") / os.uname().release
    if any(modules.rglob("overlay.ko*")) if modules.is_dir() else False:
        return Finding("overlayfs", Status.OK, "overlay loads as a module")
    return Finding("overlayfs", Status.FAIL, "the kernel has no overlay filesystem",
                   "errand's images and working copies are overlay stacks: use a kernel with CONFIG_OVERLAY_FS")


def _cgroups() -> Finding:
    mounts = [line.split() for line in Path("/proc/self/mounts").read_text().splitlines()]
    v2 = next((fields[1] for fields in mounts if fields[2] == "cgroup2"), None)
    v1 = {option for fields in mounts if fields[2] == "cgroup" for option in fields[3].split(",")}
    controllers = set(Path(v2, "cgroup.controllers").read_text().split()) if v2 else set()
    have = {name for name in ("memory", "pids", "cpu") if name in controllers or name in v1}
    kind = "hybrid v1/v2" if v2 and v1 else "v2" if v2 else "v1" if v1 else "none"
    missing = {"memory", "pids", "cpu"} - have
    if kind == "none":
        return Finding("cgroups", Status.FAIL, "no cgroup filesystem is mounted",
                       "mount cgroup2 on /sys/fs/cgroup (systemd does)")
    if missing:
        return Finding("cgroups", Status.WARN, f"{kind}; no {', '.join(sorted(missing))} controller",
                       "sandboxes run, but their limits on those resources are not enforced")
    writable = os.access(v2 or "/sys/fs/cgroup", os.W_OK)
    if not writable:
        return Finding("cgroups", Status.WARN, f"{kind}, not writable by this user",
                       "run errand as root (or delegate a cgroup subtree to its user)")
    return Finding("cgroups", Status.OK, f"{kind}: memory, pids and cpu")


def _runsc() -> Finding:
    path = shutil.which("runsc")
    if path is None:
        return Finding("gVisor (runsc)", Status.WARN, "not installed: the gVisor isolation tier is unavailable",
                       "install the `runsc` package for isolation = \"gvisor\"")
    return Finding("gVisor (runsc)", Status.OK, _output([path, "--version"]).splitlines()[0].strip())


def _git() -> Finding:
    path = shutil.which("git")
    if path is None:
        return Finding("git", Status.FAIL, "git is not installed", "install the `git` package")
    return Finding("git", Status.OK, _output([path, "--version"]).strip())


def _disk() -> Finding:
    home = _settings.home()
    where = home if home.exists() else next(parent for parent in home.parents if parent.exists())
    free = shutil.disk_usage(where).free
    detail = f"{free / GIB:.1f} GiB free under {where}"
    if free < DISK_FAIL:
        return Finding("disk", Status.FAIL, detail, "image layers and working copies need room: free some, "
                                                     "or point ERRAND_HOME at a larger disk")
    if free < DISK_WARN:
        return Finding("disk", Status.WARN, detail, "setup layers of large projects take gigabytes")
    return Finding("disk", Status.OK, detail)


def _port(port: int) -> Finding:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as error:
            return Finding("port", Status.WARN, f"127.0.0.1:{port} is taken ({error.strerror})",
                           f"`errand serve --port` another port, or stop what listens on {port}")
    return Finding("port", Status.OK, f"127.0.0.1:{port} is free for errand serve")


# ----------------------------------------------------------- the deployment


def _database(url: str) -> Finding:
    import sqlalchemy as sa
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    from errand import database

    shown = sa.make_url(url).render_as_string(hide_password=True)
    engine = database.connect(url)
    try:
        with engine.connect() as connection:
            current = set(MigrationContext.configure(connection).get_current_heads())
    except sa.exc.DBAPIError as error:
        return Finding("database", Status.FAIL, f"{shown} does not answer: {_first_line(str(error.orig))}",
                       "check the URL, that the database server runs, and that the role and database exist "
                       "(docs: deploy)")
    finally:
        engine.dispose()
    heads = set(ScriptDirectory(str(database.MIGRATIONS)).get_heads())
    if not current:
        return Finding("database", Status.WARN, f"{shown} answers and is empty",
                       "the first errand serve or worker creates the tables")
    if current != heads:
        return Finding("database", Status.FAIL, f"{shown} is at {', '.join(sorted(current))}, errand needs "
                       f"{', '.join(sorted(heads))}", "start one errand serve of this version to migrate it")
    return Finding("database", Status.OK, f"{shown} answers, migrated to {', '.join(sorted(heads))}")


def _temporal(address: str) -> Finding:
    # The probe runs in a child: temporalio's core runtime keeps threads that may call into Python while
    # a short-lived interpreter finalizes, which aborts it (SIGABRT) after the check has been answered.
    probe = subprocess.run([sys.executable, "-m", "errand.cli.doctor", "temporal", address], capture_output=True,
                           text=True, timeout=PROBE_TIMEOUT * 4)
    answer = probe.stdout.strip()
    if answer == "ok":
        return Finding("temporal", Status.OK, f"{address} answers its health check")
    return Finding("temporal", Status.FAIL, f"{address} does not answer: {_first_line(answer) or 'no answer'}",
                   "start the Temporal service (docs: deploy), or check --temporal")


def _probe_temporal(address: str) -> str:
    async def health() -> None:
        from temporalio.client import Client

        client = await Client.connect(address)
        await client.service_client.check_health()

    try:
        asyncio.run(asyncio.wait_for(health(), PROBE_TIMEOUT))
    except TimeoutError:
        return f"no answer within {PROBE_TIMEOUT:g} s"
    except Exception as error:  # noqa: BLE001 - unreachable in any way is the answer
        return _first_line(str(error)) or type(error).__name__
    return "ok"


def _server(url: str) -> Finding:
    import httpx

    try:
        response = httpx.get(url.rstrip("/") + "/readyz", timeout=PROBE_TIMEOUT)
    except httpx.HTTPError as error:
        return Finding("server", Status.FAIL, f"{url} does not answer: {error}", "is errand serve running there?")
    if response.status_code == 200:
        return Finding("server", Status.OK, f"{url} is ready")
    try:
        checks = response.json().get("checks", {})
        down = [f"{name}: {check.get('detail')}" for name, check in checks.items() if not check.get("ok")]
    except (ValueError, AttributeError):
        down = [f"HTTP {response.status_code}"]
    return Finding("server", Status.FAIL, f"{url} is not ready ({'; '.join(down) or response.status_code})",
                   "see the server's log; /readyz names the dependency that is down")


# ------------------------------------------------------------------ plumbing


def _output(argv: list[str]) -> str:
    return subprocess.run(argv, capture_output=True, text=True, timeout=PROBE_TIMEOUT).stdout


def _read_int(path: str) -> int | None:
    try:
        return int(Path(path).read_text().strip())
    except (OSError, ValueError):
        return None


def _first_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[0][:300] if lines else ""


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def _render(findings: Iterable[Finding], console: Console) -> None:
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    for column in ("check", "", "found", "what to do"):
        table.add_column(column, overflow="fold")
    colours = {Status.OK: "green", Status.WARN: "yellow", Status.FAIL: "red"}
    for finding in findings:
        table.add_row(finding.name, f"[{colours[finding.status]}]{finding.status.value}[/]",
                      printable(finding.detail), printable(finding.fix))
    console.print(table)


def doctor(
    database_url: Annotated[str | None, typer.Option("--database-url", help="Check the team's store (default: "
                                                     "ERRAND_DATABASE_URL when set).")] = None,
    temporal: Annotated[str | None, typer.Option("--temporal", help="Check a Temporal service, HOST:PORT "
                                                 "(default: ERRAND_TEMPORAL when set).")] = None,
    server: Annotated[str | None, typer.Option("--server", help="Check an errand server's readiness, a URL "
                                               "(default: ERRAND_SERVER when set).")] = None,
    port: Annotated[int, typer.Option("--port", help="The port errand serve would take.")] = 8470,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object: every finding.")] = False,
) -> None:
    """Check that this machine can run errand (bubblewrap, namespaces, overlayfs, cgroups, runsc, git,
    disk, the port) and that a team deployment's database, Temporal and server answer. Exits 1 on a failure."""
    findings = machine_checks(port=port) + deployment_checks(
        database_url=database_url or os.environ.get("ERRAND_DATABASE_URL"),
        temporal=temporal or os.environ.get("ERRAND_TEMPORAL"), server=server or os.environ.get("ERRAND_SERVER"))
    failed = any(finding.status is Status.FAIL for finding in findings)
    if as_json:
        print(json.dumps({"ok": not failed, "findings": [asdict(finding) for finding in findings]}, indent=2))
    else:
        _render(findings, Console(emoji=False))
        Console(emoji=False, stderr=True).print(
            "[red]errand cannot work here until the failures are fixed[/]" if failed else "[green]ready[/]")
    if failed:
        raise typer.Exit(1)


if __name__ == "__main__" and sys.argv[1:2] == ["temporal"]:
    print(_probe_temporal(sys.argv[2]), flush=True)
    os._exit(0)  # see _temporal: no finalization for the core runtime's threads to trip over
