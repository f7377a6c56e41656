"""SandboxHandle: a started sandbox — its commands, files, egress, pause and end.

:class:`~errand.sandbox.AsyncSandbox` is this handle plus making a sandbox
from an ``Image`` and snapshotting one into an ``Image``; an image build step
starts a bare handle of its own (:func:`start`) and keeps its writes as a
layer (:func:`commit_writes`), so building an image never needs
``AsyncSandbox``, which needs built images.
"""

from __future__ import annotations

import asyncio
import builtins
import concurrent.futures
import contextlib
import logging
import math
import os
import secrets
import shutil
import socket
import string
import subprocess
import sys
import threading
import time
import uuid
import weakref
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Self

from errand import _settings
from errand.errors import ConfigError, ErrandError, SandboxError, SandboxNotFound, SandboxTerminated
from errand.sandbox._backends.cgroups import Cgroup, SandboxUsage
from errand.sandbox._backends.channel import AgentChannel, Ended
from errand.sandbox._backends.registry import OWNER_GRACE, Record, ended_by, forget_ended, mark_ended, records
from errand.sandbox._backends.spec import SandboxSpec, Started
from errand.sandbox._egress.gateway import GatewayRelay
from errand.sandbox._egress.intercept import CA_BUNDLE_PATH, CA_PATH, SYSTEM_BUNDLES, Interceptor
from errand.sandbox._egress.ledger import EgressLedger, read_log
from errand.sandbox._egress.proxy import EgressEvent, EgressProxy, proxy_env, receive_listeners
from errand.sandbox._egress.supervisor import set_supervised_policy, start_supervisor
from errand.sandbox._images.layers import ImageConfig, LayerStore, copy_owned_tree
from errand.sandbox.backend import Backend, get_backend
from errand.sandbox.config import check_env, sandbox_path
from errand.sandbox.files import AsyncFiles
from errand.sandbox.network import Network
from errand.sandbox.process import MAX_OUTPUT, AsyncProcess, ExecResult, read_pipe
from errand.sandbox.secret import made_for_secrets

__all__ = ["SandboxHandle", "SandboxInfo", "commit_writes", "new_sandbox_id", "start"]

_log = logging.getLogger(__name__)
_ALPHABET = string.ascii_lowercase + string.digits


@dataclass(frozen=True)
class SandboxInfo:
    id: str
    backend: str
    created_at: float
    owner_pid: int | None
    image: str
    alive: bool
    labels: dict[str, str] = field(default_factory=dict)


class SandboxHandle:
    """A started sandbox, in the process that started it or attached to it by id."""

    def __init__(self, record: Record, backend: Backend, process: subprocess.Popen[bytes] | None) -> None:
        self.id = record.id
        self._record = record
        self._backend = backend
        self._process = process
        self._dead = Ended()
        self._proxy: EgressProxy | None = None
        self._gateway: GatewayRelay | None = None
        self._terminated = False
        self._ending: asyncio.Future[None] | None = None  # the one terminate every call waits for
        self._finished = False
        self._finish_lock = threading.Lock()
        # The end of its log, kept when its files go (a sandbox that ended by itself is tidied at
        # once): a command tried after that still says what it last printed.
        self._last_log = ""
        self._cleanup: asyncio.Future[None] | None = None
        self._deadline_timer: asyncio.TimerHandle | None = None
        self._paused = False
        self._pidfd: int | None = None
        self._spare: AgentChannel | None = None  # a connection opened ahead (a pooled sandbox's)
        self._watch_exit()
        self._deadline_timer = self._enforce_deadline()
        self.files = AsyncFiles(self.id, self._connect)
        self._image = ImageConfig.from_fields(record.image)

    # ---------------------------------------------------------------- creation

    @classmethod
    async def _start(cls, backend: Backend, spec: SandboxSpec) -> Self:
        # Off the event loop (one thread hop for both): copying trees and the launcher's
        # fork block for milliseconds, and the loop serves other sandboxes meanwhile.
        launch = _LAUNCHERS.submit(_launch, backend, spec)
        try:
            started = await asyncio.wrap_future(launch)
        except asyncio.CancelledError:
            # A launch under way goes on in its thread: end the sandbox it starts.
            launch.add_done_callback(lambda done: _LAUNCHERS.submit(_abandon, backend, done))
            raise
        record = started.record
        sandbox = cls(record, backend, started.process)
        try:
            if started.proxy_channel is not None:
                await sandbox._serve_egress(started.proxy_channel, spec.network, spec.gateway, spec.interceptor)
            if spec.interceptor is not None:
                await sandbox._trust(spec.interceptor.ca_pem)
        except BaseException:
            await sandbox.terminate()
            raise
        return sandbox

    async def _serve_egress(self, channel: socket.socket, network: Network, gateway: str | None = None,
                            interceptor: Interceptor | None = None) -> None:
        """Serve the proxy listener the launcher made inside the sandbox's network namespace:
        here, or, for a detached sandbox, in a supervisor process that lives as long as it;
        and relay the gateway's listener, if it has one, to the gateway."""
        if self._process is not None and self._record.owner_pid is None:
            await start_supervisor(self._record, channel, network, gateway, interceptor)
            return
        listeners = await receive_listeners(channel, 1 if gateway is None else 2)
        if len(listeners) != (1 if gateway is None else 2):
            for listener in listeners:
                listener.close()
            raise SandboxError(f"sandbox {self.id} failed to start: {self._record.log_tail().strip()}",
                               sandbox_id=self.id, code="start_failed")
        self._proxy = _egress_proxy()
        await self._proxy.serve(self.id, listeners[0], network, self._record.directory / "egress.log", interceptor)
        if gateway is not None:
            self._gateway = GatewayRelay(gateway)
            await self._gateway.serve(listeners[1])

    async def _trust(self, ca: bytes) -> None:
        """Make the sandbox's egress CA trusted inside: alone at CA_PATH (NODE_EXTRA_CA_CERTS), with
        the image's trust store at CA_BUNDLE_PATH (SSL_CERT_FILE and the like), and appended to
        that store itself, for programs that read only it."""
        system = b""
        for path in SYSTEM_BUNDLES:
            if await self.files.exists(path):
                system = await self.files.read(path)
                try:
                    await self.files.write(path, system.rstrip(b"\n") + b"\n" + ca)
                except ErrandError as error:
                    # A store bound read-only (a task's setup binds the host's, named by pip's own
                    # settings) stays as it is: the variables above name the bundle that holds the CA.
                    if error.code != "read_only":
                        raise
                break
        await self.files.write(CA_PATH, ca)
        await self.files.write(CA_BUNDLE_PATH, (system.rstrip(b"\n") + b"\n" + ca).lstrip(b"\n"))

    @classmethod
    async def from_id(cls, sandbox_id: str) -> Self:
        """Attach to a live sandbox, from this or any other process."""
        record = Record.load(sandbox_id) if _valid_id(sandbox_id) else None
        if record is None or not record.processes_alive():
            raise SandboxNotFound(f"no live sandbox {sandbox_id!r}; `errand sandbox ls` lists them",
                                  sandbox_id=sandbox_id)
        return cls(record, get_backend(record.backend), None)

    @classmethod
    async def list(cls) -> builtins.list[SandboxInfo]:
        """This errand home's live sandboxes (another home's are not listed, nor reachable by id)."""
        return [SandboxInfo(r.id, r.backend, r.created_at, r.owner_pid, str(r.image.get("key", "")), True,
                            dict(r.labels))
                for r in records() if r.processes_alive()]

    # --------------------------------------------------------------- commands

    async def exec(
        self,
        *args: str,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        user: str | int | None = None,
        timeout: float | None = None,
        text: bool = True,
    ) -> AsyncProcess:
        """Start a command; returns at once with its streams."""
        argv = _argv(args)
        directory = sandbox_path(cwd, what="cwd") if cwd is not None else self._record.workdir
        uid, gid = await self._resolve_user(user)
        proxy = proxy_env() if self._record.proxied else {}
        environment = {**dict(self._image.env), **proxy, **self._record.env, **(env or {})}
        check_env(environment)
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int | float)
                                    or not math.isfinite(timeout) or timeout <= 0):
            raise ConfigError(f"timeout must be positive, not {timeout!r}", code="invalid_timeout")
        return await self._spawn(argv, directory, uid, gid, environment, timeout, text)

    async def _spawn(self, argv: builtins.list[str], cwd: str, uid: int, gid: int, env: dict[str, str],
                     timeout: float | None, text: bool) -> AsyncProcess:
        loop = asyncio.get_running_loop()
        stdin_r, stdin_w = os.pipe2(os.O_CLOEXEC)
        stdout_r, stdout_w = os.pipe2(os.O_CLOEXEC)
        stderr_r, stderr_w = os.pipe2(os.O_CLOEXEC)
        channel = None
        try:
            channel = await self._connect()
            fields = ["exec", cwd, str(uid), str(gid), str(len(env)),
                      *(f"{k}={v}" for k, v in env.items()), *argv]
            await channel.send(fields, (stdin_r, stdout_w, stderr_w))
        except BaseException:
            for fd in (stdin_w, stdout_r, stderr_r):
                os.close(fd)
            if channel is not None:
                channel.close()
            raise
        finally:
            for fd in (stdin_r, stdout_w, stderr_w):
                os.close(fd)
        try:
            reply = await channel.receive()
            reply.raise_for_error(self.id, f"cannot start {argv[0]}")
        except BaseException:
            for fd in (stdin_w, stdout_r, stderr_r):
                os.close(fd)
            channel.close()
            raise
        os.set_blocking(stdin_w, False)
        stdout = await _reader(loop, stdout_r)
        stderr = await _reader(loop, stderr_r)
        return AsyncProcess(channel, int(reply.fields[1]), stdin_w, stdout, stderr, text=text,
                            timeout=timeout, sandbox_id=self.id)

    async def run(
        self,
        *args: str,
        input: str | bytes | None = None,  # noqa: A002 - the name subprocess.run uses
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        user: str | int | None = None,
        timeout: float | None = None,
        max_output: int = MAX_OUTPUT,
    ) -> ExecResult:
        """Run a command to completion and collect its output (``max_output`` bytes per stream
        at most; the result says ``truncated`` if there was more)."""
        if input is not None and not isinstance(input, str | bytes | bytearray | memoryview):
            raise ConfigError(f"input must be str or bytes, not {type(input).__name__}", code="invalid_input")
        process = await self.exec(*args, cwd=cwd, env=env, user=user, timeout=timeout)
        try:
            if input is None:
                await process.stdin.close()
            result = await process.result(max_output, input=input)
        finally:
            await process.close()  # a run cancelled, or failed, leaves nothing running nor open
        if result.exit_code == 127 and len(args) == 1 and any(c.isspace() for c in args[0]):
            # One argument is one program's name, as in subprocess; "ls -la" is a command line.
            hint = (f"errand: {args[0]!r} is one argument, so it was run as a program of that name; for a "
                    f"shell command line use sandbox.shell({args[0]!r}), or pass each word as its own "
                    "argument\n")
            result = replace(result, stderr=result.stderr + hint)
        return result

    async def shell(
        self,
        command: str,
        *,
        input: str | bytes | None = None,  # noqa: A002 - the name subprocess.run uses
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        user: str | int | None = None,
        timeout: float | None = None,
        max_output: int = MAX_OUTPUT,
    ) -> ExecResult:
        """Run a shell command line (``/bin/sh -c command``: pipes, globs, ``&&``, variables) to
        completion, as :meth:`run` does; ``run("ls", "-la")`` runs a program without a shell."""
        if not isinstance(command, str) or not command.strip():
            raise ConfigError("shell() takes a non-empty command line", code="invalid_command")
        return await self.run("/bin/sh", "-c", command, input=input, cwd=cwd, env=env, user=user, timeout=timeout,
                              max_output=max_output)

    # ------------------------------------------------------- snapshots, state

    async def _snapshot_config(self) -> ImageConfig:
        """Commit the sandbox's filesystem as layers (its image's, shared, plus one new layer
        on top), frozen meanwhile; the image that is, saved in the store."""
        self._ensure_alive()
        store = LayerStore()
        image = self._image
        layer = f"snap-{uuid.uuid4().hex[:24]}"
        copies = [f"{layer}-copy{n}" for n in range(len(self._record.copy_layers))]
        await asyncio.to_thread(_freeze, self._record)
        try:
            await asyncio.to_thread(self._copy_out, store, layer, copies)
        finally:
            if not self._paused:
                with contextlib.suppress(SandboxError):  # a sandbox gone meanwhile has nothing to thaw
                    await asyncio.to_thread(_thaw, self._record)
        env = tuple((name, value) for name, value in self._record.env.items() if not made_for_secrets(value))
        config = replace(image, key=layer, layers=image.layers + tuple(copies) + (layer,),
                         workdir=self._record.workdir, env=image.env + env)
        store.save_image(config)
        return config

    def _copy_out(self, store: LayerStore, layer: str, copies: builtins.list[str]) -> None:
        for source, name in zip(self._record.copy_layers, copies, strict=True):
            store.copy_into_layer(Path(source), name)
        store.copy_into_layer(self._backend.upper_dir(self._record), layer)

    async def pause(self) -> None:
        """Freeze every process in the sandbox where it stands (cgroup freezer); memory and
        files are kept. Commands started meanwhile wait. Safe to call when already paused."""
        await self._in_cgroup(_freeze)
        self._paused = True

    async def resume(self) -> None:
        """Let a paused sandbox's processes run again."""
        await self._in_cgroup(_thaw)
        self._paused = False

    async def _in_cgroup(self, action: Callable[[Record], None]) -> None:
        self._ensure_alive()
        try:
            await asyncio.to_thread(action, self._record)
        except (FileNotFoundError, SandboxNotFound):
            # It ended under the call, and its cgroup with it (a fork bomb ended a gVisor sandbox so).
            self._ensure_alive()
            raise SandboxTerminated(f"sandbox {self.id} has ended", sandbox_id=self.id,
                                    terminated_by=self._ended_by()) from None

    @property
    def paused(self) -> bool:
        return self._paused

    # ---------------------------------------------------------------- network

    async def set_network(self, network: Network) -> None:
        """Replace the egress policy at once; live connections it forbids are closed."""
        if not isinstance(network, Network):
            raise ConfigError("set_network takes a Network value, e.g. Network.none()", code="invalid_network")
        self._ensure_alive()
        if self._proxy is not None:
            self._proxy.set_policy(self.id, network)
        elif self._record.proxied:
            await set_supervised_policy(self._record, network)
        else:
            raise SandboxError("this sandbox has no egress proxy to change: it was created detached with "
                               "Network.none()", sandbox_id=self.id, code="no_proxy")

    async def egress_log(self) -> builtins.list[EgressEvent]:
        """Egress decisions so far: time, host, port, verdict, reason, bytes. Bounded: past a
        megabyte of log, the first and last refusals and the recent events (``egress_ledger``
        counts every one)."""
        return read_log(self._egress_text())[1]

    async def egress_ledger(self) -> EgressLedger:
        """Exact counts of every egress decision so far, per host and port (connections, bytes,
        refusals by reason), with the first and last refusals verbatim."""
        return read_log(self._egress_text())[0]

    def _egress_text(self) -> str:
        try:
            return (self._record.directory / "egress.log").read_text(errors="replace")
        except FileNotFoundError:
            return ""

    async def egress_events(self) -> AsyncIterator[EgressEvent]:
        """Egress decisions as they happen, until the sandbox ends."""
        if self._proxy is None:
            raise SandboxError("egress events stream only in the process that created the sandbox",
                               sandbox_id=self.id, code="not_owner")
        queue = self._proxy.subscribe(self.id)
        try:
            while (event := await queue.get()) is not None:
                yield event
        finally:
            self._proxy.unsubscribe(self.id, queue)

    @property
    def alive(self) -> bool:
        return not self._dead.is_set() and self._record.processes_alive()

    def memory_usage(self) -> int:
        """Bytes of memory charged to the sandbox now (cgroup accounting)."""
        return Cgroup.open(self._record.cgroup).memory_usage()

    def usage(self) -> SandboxUsage:
        """CPU time and memory the sandbox's processes use (cgroup accounting)."""
        return Cgroup.open(self._record.cgroup).usage()

    async def terminate(self) -> None:
        """Kill every process, unmount, remove scratch. Safe to call more than once. A handle that
        attached by id (not the sandbox's creator) first leaves word of who ended it, so the
        owner's run can say a person did, not only that its sandbox is gone.

        Cancelling the caller never stops the ending half-way (marked ended, not yet killed, and
        every later call a no-op): it runs to its end in a task of its own, and every call, the
        first included, waits for that one, a cancelled call too before its cancel goes on (an
        attempt cancelled inside its sandbox's end once returned with the sandbox still running)."""
        if self._ending is None:
            self._terminated = True
            self._ending = asyncio.ensure_future(self._end())
        try:
            await asyncio.shield(self._ending)
        except asyncio.CancelledError:
            await asyncio.wait([self._ending])  # a second cancel of the caller stops this wait, not the end
            raise

    async def _end(self) -> None:
        self._drop_spare()
        if self._gateway is not None:
            self._gateway.close()
        if self._proxy is not None:
            await self._proxy.stop(self.id)
        tell = self._process is None and self._record.owner_pid is not None and self._record.owner_alive()
        await asyncio.to_thread(self._kill, _terminator() if tell else None)
        # Seen to end on the loop too (its watch let go), unless the launcher outlived the wait already.
        reaped = self._process is None or self._process.returncode is not None
        if reaped and self._pidfd is not None and not self._dead.is_set():
            try:
                await asyncio.wait_for(self._dead.wait(), 10)
            except TimeoutError:
                pass
        await self._finished_cleanup()

    def _kill(self, terminator: str | None) -> None:
        """The blocking part of an end, on one thread (each hop to a thread and back cost more
        CPU than most of what it ran): word of who ended it (``terminator``, for its owner) or
        the owner's own word forgotten, the kill, and for the sandbox's creator, its launcher
        reaped and the sandbox cleaned up."""
        if terminator is not None:
            try:
                mark_ended(self.id, terminator)
            except OSError as error:  # ended all the same: its owner learns only that it is gone
                _log.warning("sandbox %s: who ended it could not be noted for its owner: %s", self.id, error)
        elif self._process is not None:
            forget_ended(self.id)
        self._backend.kill(self._record)
        if self._process is not None:
            try:
                self._process.wait(_REAP_WAIT)
            except subprocess.TimeoutExpired:
                return  # still there after the kill: cleaned up all the same, on the loop's side
            self._finish()

    async def close(self) -> None:
        """Let go of this handle and leave the sandbox running: stop watching it and free
        what the handle holds. For handles from :meth:`from_id` that only looked (a
        status page, an egress log); the creator's handle ends its sandbox with
        :meth:`terminate`. Safe to call more than once."""
        self._drop_spare()
        if self._pidfd is not None:
            asyncio.get_running_loop().remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None
        if self._deadline_timer is not None:
            self._deadline_timer.cancel()
            self._deadline_timer = None

    async def wait(self) -> None:
        """Wait until the sandbox ends (its timeout, idle timeout or a terminate)."""
        await self._dead.wait()
        await self._finished_cleanup()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.terminate()

    # ---------------------------------------------------------------- helpers

    def _watch_exit(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            self._pidfd = os.pidfd_open(self._record.pid)
        except ProcessLookupError:
            self._pidfd = None
            self._dead.set()
            return
        if self._process is None and not self._record.processes_alive():  # a creator watches its own child
            self._on_exit()
            return
        loop.add_reader(self._pidfd, self._on_exit)

    def _enforce_deadline(self) -> asyncio.TimerHandle | None:
        """The agent ends the sandbox at its lifetime, but runs inside it (a process there
        could stop it): the owner enforces the deadline too, as gc does for orphans."""
        if self._record.deadline is None or self._process is None:
            return None
        delay = max(0.0, self._record.deadline - time.time()) + OWNER_GRACE
        return asyncio.get_running_loop().call_later(delay, self._expire)

    def _expire(self) -> None:
        if not self._dead.is_set():
            self._expiry = asyncio.ensure_future(self.terminate())

    def _on_exit(self) -> None:
        if self._pidfd is not None:
            asyncio.get_running_loop().remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None
        if self._process is not None:
            self._process.poll()  # reap our child
        self._dead.set()
        self._drop_spare()
        if self._deadline_timer is not None:
            self._deadline_timer.cancel()
        if self._gateway is not None:
            self._gateway.close()
        if self._proxy is not None:
            self._proxy_stop = asyncio.ensure_future(self._proxy.stop(self.id))
        if not self._terminated:
            # It ended by itself (lifetime or idle timeout): tidy up now, not at the next gc.
            try:
                self._cleanup = asyncio.get_running_loop().run_in_executor(None, self._finish)
            except RuntimeError:  # the loop is shutting down: no executor left, so tidy inline
                self._finish()

    def _finish(self) -> None:
        # Held for the whole cleanup: whoever comes second returns only once it is done.
        with self._finish_lock:
            if not self._finished:
                if not self._terminated:  # a terminated sandbox's end is told without its log (_why_closed)
                    self._last_log = self._record.log_tail(2000)
                self._backend.cleanup(self._record)
                self._finished = True

    async def _finished_cleanup(self) -> None:
        if self._cleanup is not None:
            await self._cleanup
        elif not self._finished:
            await asyncio.to_thread(self._finish)

    def _ensure_alive(self) -> None:
        if self._dead.is_set() or self._terminated:
            cause = self._why_closed()
            raise SandboxTerminated(f"sandbox {self.id} has ended" + (f" ({cause})" if cause else ""),
                                    sandbox_id=self.id, terminated_by=self._ended_by())

    async def _open_spare(self) -> None:
        """Connect to the agent ahead of need: the next command or file operation starts without
        connecting (~0.1 ms, a warm pool's claim → first exec). An open connection keeps the
        agent busy (its idle timeout waits): only a pooled sandbox, which has none, opens one."""
        if self._spare is None:
            self._spare = await self._connect()

    def _drop_spare(self) -> None:
        spare, self._spare = self._spare, None
        if spare is not None:
            spare.close()

    async def _connect(self) -> AgentChannel:
        self._ensure_alive()
        spare, self._spare = self._spare, None
        if spare is not None:
            return spare
        return await AgentChannel.connect(self._record.control_socket, self.id, self._dead, self._why_closed,
                                          self._ended_by)

    def _ended_by(self) -> str | None:
        """Who ended the sandbox from outside this handle, if someone did (never this handle's own terminate)."""
        return None if self._terminated and self._process is not None else ended_by(self.id)

    def _why_closed(self) -> str:
        """What the sandbox shows of why a connection closed unanswered: terminated, by whom if
        from elsewhere, its launcher's exit, the last line of its log; empty when it shows nothing."""
        by = self._ended_by()
        if by is not None:
            return f"terminated by {by}"
        if self._terminated:
            return "terminated"
        parts = []
        status = self._process.poll() if self._process is not None else None
        if status is not None:
            parts.append(f"exited with status {status}" if status >= 0 else f"killed by signal {-status}")
        lines = [line for line in (self._record.log_tail(2000) or self._last_log).splitlines() if line.strip()]
        if lines:
            parts.append(f"its log ends: {lines[-1].strip()[:300]}")
        return "; ".join(parts)

    async def _resolve_user(self, user: str | int | None) -> tuple[int, int]:
        if user is None or user == "root" or user == 0:
            return 0, 0
        if isinstance(user, int) and not isinstance(user, bool):
            if not 0 <= user < 65536:
                raise ConfigError(f"uid must be within 0..65535, not {user}", code="invalid_user")
            return user, user
        if not isinstance(user, str) or not user or ":" in user:
            raise ConfigError(f"user must be a name or a uid, not {user!r}", code="invalid_user")
        for line in (await self.files.read_text("/etc/passwd")).splitlines():
            fields = line.split(":")
            if len(fields) > 3 and fields[0] == user:
                return int(fields[2]), int(fields[3])
        raise ConfigError(f"no user {user!r} in the sandbox's /etc/passwd", code="unknown_user")


# ------------------------------------------------------------------ functions


async def start(backend: Backend, spec: SandboxSpec) -> SandboxHandle:
    """A sandbox started from a resolved spec on ``backend`` (image build steps)."""
    return await SandboxHandle._start(backend, spec)


async def commit_writes(handle: SandboxHandle, layer: str, store: LayerStore) -> str:
    """Commit just what the sandbox wrote (its writable layer) as ``layer`` in ``store``."""
    await asyncio.to_thread(store.copy_into_layer, handle._backend.upper_dir(handle._record), layer)
    return layer


_REAP_WAIT = 10.0  # seconds a terminate waits for the launcher's exit after the kill, as for its pidfd


def _freeze(record: Record) -> None:
    Cgroup.open(record.cgroup).freeze()


def _thaw(record: Record) -> None:
    Cgroup.open(record.cgroup).thaw()



def _argv(args: Iterable[str]) -> list[str]:
    argv = list(args)
    if not argv:
        raise ConfigError("exec needs a command, e.g. sb.exec('ls', '-l')", code="invalid_command")
    for arg in argv:
        if not isinstance(arg, str) or "\0" in arg:
            raise ConfigError(f"command arguments must be strings without NUL bytes, not {arg!r}",
                              code="invalid_command")
    return argv


_proxies: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, EgressProxy] = weakref.WeakKeyDictionary()


def _egress_proxy() -> EgressProxy:
    loop = asyncio.get_running_loop()
    proxy = _proxies.get(loop)
    if proxy is None:
        proxy = _proxies[loop] = EgressProxy()
    return proxy


def new_sandbox_id() -> str:
    # One draw from the system's randomness, spelled in base 36: ten draws (secrets.choice
    # per letter) cost ten getrandom calls, 25 µs on a quiet host and most of a millisecond
    # of the event loop's time when a thousand sandboxes start at once.
    number, letters = secrets.randbelow(len(_ALPHABET) ** 10), []
    for _ in range(10):
        number, digit = divmod(number, len(_ALPHABET))
        letters.append(_ALPHABET[digit])
    return "sb-" + "".join(letters)


def _terminator() -> str:
    """This process, as a task's log names who ended its sandbox: ``errand sandbox rm`` (pid 42)."""
    program = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "python"
    if program in ("__main__.py", "-m", "-c", ""):
        program = "errand" if any("errand" in part for part in sys.argv[:1]) else "python"
    words = [program, *(arg for arg in sys.argv[1:3] if not arg.startswith("-") and len(arg) < 40)]
    return f"`{' '.join(words)}` (pid {os.getpid()})"


def _valid_id(sandbox_id: object) -> bool:
    return (isinstance(sandbox_id, str) and sandbox_id.startswith("sb-") and len(sandbox_id) == 13
            and all(c in _ALPHABET for c in sandbox_id[3:]))


# The threads that start launchers live as long as the process: a launcher dies with the
# thread that forked it (PR_SET_PDEATHSIG), and an event loop's default executor ends its
# threads when the loop closes, while a sandbox may outlive the loop that made it.
_LAUNCHERS = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="errand-launch")


def _launch(backend: Backend, spec: SandboxSpec) -> Started:
    copies = _copy_layers(spec)
    try:
        return backend.start(spec, copies)
    except BaseException:
        for path in copies:
            shutil.rmtree(path, ignore_errors=True)
        raise


def _abandon(backend: Backend, launch: concurrent.futures.Future[Started]) -> None:
    if launch.cancelled() or launch.exception() is not None:
        return
    started = launch.result()
    if started.proxy_channel is not None:
        started.proxy_channel.close()
    backend.kill(started.record)
    started.process.wait()
    backend.cleanup(started.record)


def _copy_layers(spec: SandboxSpec) -> list[Path]:
    """Each Mount.copy becomes a private lower layer holding the copied tree."""
    layers: list[Path] = []
    try:
        for n, mount in enumerate(m for m in spec.mounts if m.kind == "copy"):
            layer = _settings.home() / "scratch" / f"{spec.id}-{n}"
            layers.append(layer)
            copy_owned_tree(mount.source, layer / mount.target.lstrip("/"), layer, _settings.sandbox_uid())
    except BaseException:
        for path in layers:
            shutil.rmtree(path, ignore_errors=True)
        raise
    return layers


async def _reader(loop: asyncio.AbstractEventLoop, fd: int) -> asyncio.StreamReader:
    return read_pipe(loop, fd, 1 << 24)

