"""A warm pool: sandboxes of one image started ahead of need, configured when claimed.

Starting a sandbox costs a few milliseconds of kernel work (namespaces, an
overlay root, cgroups, bwrap); claiming one from a pool costs what configuring
it does, a fraction of a millisecond::

    async with await AsyncSandboxPool.start(image, size=4) as pool:
        sandbox = await pool.claim(network=Network.allow("api.example.org"), resources=Resources(memory="1GiB"),
                                   env={"CI": "1"}, labels={"task": "t-1"}, timeout=600)
        async with sandbox:
            await sandbox.run("pytest")

A claim takes the egress policy, the memory, process and CPU limits, the
environment, the working directory, labels and lifetime it is given, and the
pool starts another sandbox in its place, a moment later, so that the claimed
sandbox's first commands do not compete with that start for the CPU. What
cannot change after a start is fixed by the pool: the image, the isolation
tier and the writable layer's size and medium (a claim asking another raises ``pool_mismatch``), and mounts
(a claim with mounts raises ``pool_mounts``: create that sandbox with
``AsyncSandbox.create``). A claimed sandbox's lifetime is held by its owner
and, should the owner die, by garbage collection; unlike a created one's, not
also by its agent inside, which was started before the lifetime was known.
When the pool is empty a claim starts a sandbox the ordinary way (``misses``
counts those). Unclaimed sandboxes end with :meth:`AsyncSandboxPool.close`, or
with their owner process, as every sandbox does.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping, Sequence
from typing import Self

from errand.errors import ConfigError, SandboxError
from errand.sandbox._backends.cgroups import Cgroup, Limits
from errand.sandbox._labels import check_labels
from errand.sandbox.config import Mount, Resources
from errand.sandbox.image import Image
from errand.sandbox.network import Network
from errand.sandbox.sandbox import AsyncSandbox, validate

__all__ = ["AsyncSandboxPool"]

_MAX_SIZE = 1000
_REFILL_DELAY = 0.05  # seconds between a claim and the start of the sandbox replacing it
_SAVE_DELAY = 0.01  # seconds between a claim and its record's write (its first command goes first)


class AsyncSandboxPool:
    """Sandboxes of one image, started ahead. Make one with ``await AsyncSandboxPool.start(...)``."""

    def __init__(self, image: Image, size: int, resources: Resources, isolation: str) -> None:
        self.image = image
        self.size = size
        self.resources = resources
        self.isolation = isolation
        self.misses = 0  # claims that found the pool empty and started a sandbox themselves
        self._ready: list[AsyncSandbox] = []
        self._starting: set[asyncio.Task[None]] = set()
        self._ending: set[asyncio.Task[None]] = set()  # pooled sandboxes that died unclaimed
        self._closed = False

    @classmethod
    async def start(cls, image: Image | None = None, *, size: int = 4, resources: Resources | None = None,
                    isolation: str = "namespace") -> Self:
        """A pool of ``size`` sandboxes of ``image``, each started before this returns."""
        if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= _MAX_SIZE:
            raise ConfigError(f"a pool's size must be an int in 1..{_MAX_SIZE}, not {size!r}", code="invalid_pool")
        validate(image, (), None, resources, None, None, None, None)
        pool = cls(image or Image.base(), size, resources or Resources(), isolation)
        try:
            await asyncio.gather(*(pool._start_one() for _ in range(size)))
        except BaseException:
            await pool.close()
            raise
        return pool

    @property
    def ready(self) -> int:
        """Sandboxes started and waiting to be claimed."""
        return len(self._ready)

    async def claim(
        self,
        *,
        network: Network | None = None,
        resources: Resources | None = None,
        timeout: float | None = 300,
        workdir: str | None = None,
        env: Mapping[str, str] | None = None,
        labels: Mapping[str, str] | None = None,
        mounts: Sequence[Mount] = (),
    ) -> AsyncSandbox:
        """A started sandbox, configured as asked; the pool starts another in its place."""
        if self._closed:
            raise SandboxError("the pool is closed", code="pool_closed")
        declared = validate(None, mounts, network, resources, timeout, None, workdir, env)
        checked_labels = check_labels(labels)
        if declared.mounts:
            raise ConfigError("a pooled sandbox takes no mounts (they are fixed when it starts); "
                              "create it with AsyncSandbox.create", code="pool_mounts")
        wanted = declared.resources
        if (wanted.disk, wanted.disk_medium) != (self.resources.disk, self.resources.disk_medium):
            raise ConfigError(f"this pool's sandboxes have disk={self.resources.disk} "
                              f"({self.resources.disk_medium}); start a pool for another", code="pool_mismatch")
        if wanted.cpus is None and self.resources.cpus is not None:
            raise ConfigError("this pool's sandboxes have a CPU limit; a claim can change it, not remove it",
                              code="pool_mismatch")
        sandbox = self._take()
        if sandbox is None:
            self._refill()
            self.misses += 1
            return await AsyncSandbox.create(self.image, network=declared.network, resources=wanted,
                                             timeout=declared.timeout, workdir=declared.workdir,
                                             env=dict(declared.env), labels=dict(checked_labels),
                                             isolation=self.isolation)
        # The replacement's start (a launcher, bwrap, their namespaces and mounts) would
        # compete for the CPU with the claimed sandbox's first commands: it waits a moment.
        asyncio.get_running_loop().call_later(_REFILL_DELAY, self._refill)
        try:
            await _configure(sandbox, wanted if wanted != self.resources else None, declared.network,
                             declared.timeout, declared.workdir, dict(declared.env), dict(checked_labels))
        except BaseException:
            await sandbox.terminate()
            raise
        return sandbox

    async def close(self) -> None:
        """End the sandboxes nobody claimed, and stop starting new ones. Safe to call twice."""
        self._closed = True
        for task in list(self._starting):
            task.cancel()
        await asyncio.gather(*self._starting, *self._ending, return_exceptions=True)
        ready, self._ready = self._ready, []
        await asyncio.gather(*(sandbox.terminate() for sandbox in ready), return_exceptions=True)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _take(self) -> AsyncSandbox | None:
        while self._ready:
            sandbox = self._ready.pop(0)
            if sandbox.alive:
                return sandbox
            # Ended while waiting (killed from outside): tidy it away, take the next.
            task = asyncio.ensure_future(sandbox.terminate())
            self._ending.add(task)
            task.add_done_callback(self._ending.discard)
        return None

    def _refill(self) -> None:
        if self._closed or len(self._ready) + len(self._starting) >= self.size:
            return
        task = asyncio.ensure_future(self._start_one())
        self._starting.add(task)
        task.add_done_callback(self._started)

    def _started(self, task: asyncio.Task[None]) -> None:
        self._starting.discard(task)
        if not task.cancelled() and task.exception() is not None:
            return  # the next claim starts its own (a miss) and tries the refill again
        self._refill()

    async def _start_one(self) -> None:
        sandbox = await AsyncSandbox.create(self.image, resources=self.resources, timeout=None,
                                            isolation=self.isolation)
        try:
            # create returns while the sandbox is still coming up (its agent's socket queues
            # requests meanwhile); a pooled one is ready only once its agent has answered.
            await sandbox.files.exists("/")
            await sandbox._open_spare()
        except BaseException:
            await sandbox.terminate()
            raise
        if self._closed:
            await sandbox.terminate()
            return
        self._ready.append(sandbox)


async def _configure(sandbox: AsyncSandbox, resources: Resources | None, network: Network, timeout: float | None,
                     workdir: str | None, env: dict[str, str], labels: dict[str, str]) -> None:
    record = sandbox._record
    if resources is not None:
        Cgroup.open(record.cgroup).set_limits(Limits(memory_bytes=resources.memory, pids=resources.pids,
                                                     cpus=resources.cpus))
    if network.mode != "none":
        await sandbox.set_network(network)
    if workdir is not None and workdir != record.workdir:
        await _make_dirs(sandbox, workdir)
        record.workdir = workdir
    record.env = env
    record.labels = labels
    record.deadline = time.time() + timeout if timeout else None
    record.save_soon(_SAVE_DELAY)
    sandbox._deadline_timer = sandbox._enforce_deadline()


async def _make_dirs(sandbox: AsyncSandbox, path: str) -> None:
    parts = [part for part in path.split("/") if part]
    for n in range(1, len(parts) + 1):
        directory = "/" + "/".join(parts[:n])
        with contextlib.suppress(FileExistsError):
            if not await sandbox.files.exists(directory):
                await sandbox.files.mkdir(directory)
