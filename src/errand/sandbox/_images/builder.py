"""Building images: each step's layer is found in the cache or made and committed.

A step's cache key is the hash of its parent's key and the step, so changing a
step rebuilds it and what follows, never what comes before. ``run`` steps run
in a sandbox made from the image so far; their writable layer becomes the new
layer, exactly as a snapshot does. They run on the namespace tier whatever tier
the image is for: layers are the same on every tier, and it starts fastest.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import re
import shutil
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from pathlib import Path

from errand import _settings
from errand._text import printable
from errand.errors import ConfigError, ImageBuildError
from errand.sandbox._backends.spec import SandboxSpec
from errand.sandbox._handle import commit_writes, new_sandbox_id, start
from errand.sandbox._images import debian, pipconfig
from errand.sandbox._images.base_image import base_config
from errand.sandbox._images.layers import ImageConfig, LayerStore, copy_owned_tree
from errand.sandbox._images.steps import Step
from errand.sandbox.backend import get_backend
from errand.sandbox.config import Mount
from errand.sandbox.network import Network, entry_for_url
from errand.sandbox.process import AsyncProcess, AsyncStream

__all__ = ["build"]

_ERROR_LINE = re.compile(r"^(?:error|fatal|err|e)(?::|\b)|^npm err!|^\w+error:", re.IGNORECASE)
_CAUSE_LINES = 3  # the last error lines a build error's message carries; .log has the rest
_CAUSE_CHARS = 600

logger = logging.getLogger("errand.image")
LogSink = Callable[[str], None]
# Built images by home: a config names layers in one home's store, and is no use in another's.
_memo: dict[tuple[Path, tuple[Step, ...], ImageConfig | None], ImageConfig] = {}
_BUILD_ISOLATION = "namespace"


async def build(steps: tuple[Step, ...], resolved: ImageConfig | None = None, *, log: LogSink | None = None,
                store: LayerStore | None = None) -> ImageConfig:
    """An image's steps built (or found cached) into layers of ``store``; ``resolved``
    is the root an image of a snapshot already has. Without ``log``, a build that has real work
    to do says so on stderr as it goes (:class:`_Progress`); one found in the cache says nothing."""
    progress = _Progress() if log is None else None
    sink = log or progress or logger.info
    try:
        return await _build(steps, resolved, log, sink, store)
    finally:
        if progress is not None:
            progress.close()


async def _build(steps: tuple[Step, ...], resolved: ImageConfig | None, log: LogSink | None, sink: LogSink,
                 store: LayerStore | None) -> ImageConfig:
    given = store is not None
    store = store or LayerStore()
    memo = (store.root, steps, resolved)
    if not given and memo in _memo:
        if log is not None:
            for step in steps[1:]:
                sink(f"CACHED {step.describe()}")
        return _memo[memo]
    config = await _root(steps[0], resolved, store, sink)
    for step in steps[1:]:
        key = hashlib.sha256(f"{config.key}\n{step.fingerprint()}".encode()).hexdigest()[:32]
        cached = store.cached_image(key)
        if cached is not None:
            sink(f"CACHED {step.describe()}")
            config = cached
            continue
        sink(f"STEP {step.describe()}")
        config = await _apply(step, config, key, store, sink)
        store.save_image(config)
    if not any(step.kind == "copy" for step in steps):
        _memo[memo] = config  # a copy step's source may change between calls
    return config


class _Progress:
    """The build's lines on stderr, for a caller that gave no ``log`` (the first ``Sandbox.create``
    of an image can take a minute): a line saying a build started, each step and its output, and
    the time it took. Cached steps are not shown; a build found whole in the cache prints nothing."""

    def __init__(self) -> None:
        self.started: float | None = None

    def __call__(self, line: str) -> None:
        logger.info(line)
        if line.startswith("CACHED "):
            return
        if self.started is None:
            self.started = time.monotonic()
            self._say("building an image (the first time only: later uses take it from the cache; pass log= "
                      "to Sandbox.create to take these lines yourself)")
        self._say(line)

    def close(self) -> None:
        if self.started is not None:
            self._say(f"image built in {time.monotonic() - self.started:.1f} s")

    @staticmethod
    def _say(line: str) -> None:
        with contextlib.suppress(OSError, ValueError):  # a closed or broken stderr stops no build
            sys.stderr.write(f"errand image: {printable(line, lines=False)}\n")
            sys.stderr.flush()


async def _root(root: Step, resolved: ImageConfig | None, store: LayerStore, sink: LogSink) -> ImageConfig:
    if root.kind == "base":
        return base_config(store, _settings.sandbox_uid())
    if root.kind == "config" and resolved is not None:
        return resolved
    if root.kind == "debian":
        return await debian.debian_config(store, root.args[0], sink)
    raise ConfigError(f"unknown image root step {root.kind!r}", code="invalid_image_step")


async def _apply(step: Step, config: ImageConfig, key: str, store: LayerStore, sink: LogSink) -> ImageConfig:
    if step.kind == "env":
        updates = dict(item.split("=", 1) for item in step.args)
        env = tuple((k, v) for k, v in config.env if k not in updates) + tuple(updates.items())
        return replace(config, key=key, env=env)
    if step.kind == "workdir":
        return replace(config, key=key, workdir=step.args[0])
    if step.kind == "copy":
        layer = _copy_layer(Path(step.args[0]), step.args[1], store, key)
        return replace(config, key=key, layers=(*config.layers, layer))
    if step.kind == "run":
        layer = await _run_layer(step, config, store, key, sink)
        return replace(config, key=key, layers=(*config.layers, layer))
    raise ConfigError(f"unknown image step {step.kind!r}", code="invalid_image_step")


def _copy_layer(source: Path, target: str, store: LayerStore, key: str) -> str:
    partial = store.partial()
    try:
        copy_owned_tree(source, partial / target.lstrip("/"), partial, _settings.sandbox_uid())
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    layer = f"layer-{key}"
    store.commit(partial, layer)
    return layer


async def _run_layer(step: Step, config: ImageConfig, store: LayerStore, key: str, sink: LogSink) -> str:
    env = dict(config.env)
    mounts: tuple[Mount, ...] = ()
    network = Network.none()
    if step.network == "pip":
        settings = pipconfig.host_pip_settings()
        env.update(settings.env)
        mounts = tuple(Mount.bind(p, p) for p in settings.paths)
        network = Network.allow(*settings.hosts) if settings.hosts else network
    elif step.network == "npm":
        from errand.sandbox.registries import host_registries  # it reads pip's settings through this package

        npm = host_registries(("npm",))
        env.update(npm.env)
        network = Network.allow(*npm.domains) if npm.domains else network
    elif step.network == "apt":
        hosts = _apt_hosts()
        network = Network.allow(*hosts) if hosts else network
    if network.mode != "none":
        sink(f"NETWORK only {', '.join(network.domains)} (the {step.network} registry, through the egress proxy)")
    spec = SandboxSpec(id=new_sandbox_id(), image=config, mounts=mounts, timeout=3600, workdir=config.workdir,
                       env=tuple(env.items()), network=network, build_capabilities=True)
    sandbox = await start(get_backend(_BUILD_ISOLATION, store), spec)
    try:
        process = await sandbox.exec("/bin/sh", "-c", step.args[0])
        lines: list[str] = []
        await process.stdin.close()
        async for line in _merged(process):
            lines.append(line)
            sink(line.rstrip("\n"))
        code = await process.wait()
        if code != 0:
            raise ImageBuildError(f"image step failed with exit code {code}: {step.describe()}{_cause(lines)}",
                                  step=step.describe(), log="".join(lines[-200:]), exit_code=code)
        image = await commit_writes(sandbox, f"layer-{key}", store)
    finally:
        await sandbox.terminate()
    return image


def _cause(lines: list[str]) -> str:
    """What the failed step said last that reads as its reason: its last error lines (pip's
    ``ERROR: No matching distribution …``, apt's ``E: …``), else its last lines at all."""
    said = [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("[notice]")]
    errors = [line for line in said if _ERROR_LINE.match(line)]
    chosen = (errors or said)[-_CAUSE_LINES:]
    if not chosen:
        return ""
    text = " / ".join(chosen)
    return " — " + (text if len(text) <= _CAUSE_CHARS else "…" + text[-_CAUSE_CHARS:])


def _apt_hosts() -> list[str]:
    """The hosts of the mirrors apt is configured with, read from apt's own sources."""
    return sorted({entry_for_url(uri) or "" for source in debian.apt_sources() for uri in source.uris} - {""})


async def _merged(process: AsyncProcess) -> AsyncIterator[str]:
    """stdout and stderr lines as they come."""
    queue: asyncio.Queue[str | None] = asyncio.Queue()

    async def pump(stream: AsyncStream) -> None:
        async for line in stream:
            await queue.put(line if isinstance(line, str) else line.decode(errors="replace"))
        await queue.put(None)

    tasks = [asyncio.ensure_future(pump(process.stdout)), asyncio.ensure_future(pump(process.stderr))]
    finished = 0
    while finished < 2:
        item = await queue.get()
        if item is None:
            finished += 1
        else:
            yield item
    await asyncio.gather(*tasks)

