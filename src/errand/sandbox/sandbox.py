"""AsyncSandbox: the one implementation of errand's sandbox API (``Sandbox`` is derived from it).

A sandbox is a :class:`~errand.sandbox._handle.SandboxHandle` (commands, files,
egress, pause, end) made from an :class:`Image`, whose filesystem can become an
``Image`` again.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from errand.errors import ConfigError
from errand.sandbox._backends import gc
from errand.sandbox._backends.spec import SandboxSpec
from errand.sandbox._egress.gateway import check_gateway
from errand.sandbox._egress.intercept import Interceptor
from errand.sandbox._handle import SandboxHandle, SandboxInfo, new_sandbox_id
from errand.sandbox._images.layers import ImageConfig
from errand.sandbox._labels import check_labels
from errand.sandbox.backend import get_backend
from errand.sandbox.config import Mount, Resources, check_env, sandbox_path
from errand.sandbox.image import Image
from errand.sandbox.network import Network
from errand.sandbox.secret import Secret, check_secrets

__all__ = ["AsyncSandbox", "SandboxInfo", "validate"]


class AsyncSandbox(SandboxHandle):
    """An isolated environment. Create with ``await AsyncSandbox.create(...)``."""

    @classmethod
    async def create(
        cls,
        image: Image | None = None,
        *,
        mounts: Sequence[Mount] = (),
        network: Network | None = None,
        resources: Resources | None = None,
        timeout: float | None = 300,
        idle_timeout: float | None = None,
        workdir: str | None = None,
        env: Mapping[str, str] | None = None,
        labels: Mapping[str, str] | None = None,
        isolation: str = "namespace",
        detach: bool = False,
        log: Callable[[str], None] | None = None,
        gateway: str | None = None,
        secrets: Sequence[Secret] = (),
    ) -> AsyncSandbox:
        """Create a sandbox. Everything about it is declared here and validated first.
        ``labels`` (e.g. ``{"task": ..., "run": ...}``) are kept with it and listed.
        ``gateway`` (the model gateway's host address, ``"127.0.0.1:PORT"``, or a Unix socket's
        path) is reached from inside at ``http://127.0.0.1:3129``, whatever ``network`` allows.
        ``secrets`` (:class:`Secret` values) are held by the egress proxy; the sandbox gets a
        placeholder for each, swapped for the value in HTTPS requests to its declared hosts."""
        declared = validate(image, mounts, network, resources, timeout, idle_timeout, workdir, env)
        interceptor = None
        if checked := check_secrets(secrets, declared.network, declared.env):
            interceptor = Interceptor(checked)
            declared = replace(declared, env=declared.env + tuple(interceptor.env().items()))
        checked_labels = check_labels(labels)
        if gateway is not None:
            gateway = check_gateway(gateway)
        backend = get_backend(isolation)
        backend.check()
        gc.collect_once()
        config = await (image or Image.base()).build_async(log=log)
        spec = replace(declared.spec(config, labels=checked_labels, detach=detach), gateway=gateway,
                       interceptor=interceptor)
        return await cls._start(backend, spec)

    async def snapshot(self) -> Image:
        """The sandbox's filesystem as a new image (layers shared, one new layer on top)."""
        return Image.from_config(await self._snapshot_config())


@dataclass(frozen=True)
class _Declared:
    """What ``create`` was told about the sandbox, checked."""

    mounts: tuple[Mount, ...]
    network: Network
    resources: Resources
    timeout: float | None
    idle_timeout: float | None
    env: tuple[tuple[str, str], ...]
    workdir: str | None  # None: the image's

    def spec(self, image: ImageConfig, *, labels: tuple[tuple[str, str], ...], detach: bool) -> SandboxSpec:
        return SandboxSpec(id=new_sandbox_id(), image=image, mounts=self.mounts, resources=self.resources,
                           network=self.network, timeout=self.timeout, idle_timeout=self.idle_timeout,
                           workdir=self.workdir or image.workdir, env=self.env, labels=labels, detach=detach)


def validate(image: object, mounts: Sequence[Mount], network: Network | None, resources: Resources | None,
              timeout: float | None, idle_timeout: float | None, workdir: str | None,
              env: Mapping[str, str] | None) -> _Declared:
    """What ``create`` (or a pool's claim) was told, checked; ConfigError names what is wrong."""
    if image is not None and not isinstance(image, Image):
        raise ConfigError(f"image must be an errand Image, not {type(image).__name__}", code="invalid_image")
    mounts = tuple(mounts)
    if not all(isinstance(m, Mount) for m in mounts):
        raise ConfigError("mounts must be Mount.copy(...) or Mount.bind(...) values", code="invalid_mount")
    targets = [m.target for m in mounts]
    if len(set(targets)) != len(targets):
        raise ConfigError(f"two mounts share a target: {sorted(targets)}", code="invalid_mount")
    for name, value in (("timeout", timeout), ("idle_timeout", idle_timeout)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)
                                  or not math.isfinite(value) or value <= 0):
            raise ConfigError(f"{name} must be a positive number of seconds or None, not {value!r}",
                              code="invalid_timeout")
    network = network or Network.none()
    if not isinstance(network, Network):
        raise ConfigError("network must be a Network value, e.g. Network.allow('example.org')",
                          code="invalid_network")
    if resources is not None and not isinstance(resources, Resources):
        raise ConfigError("resources must be a Resources(...) value", code="invalid_limit")
    environment = dict(env or {})
    check_env(environment)
    return _Declared(mounts, network, resources or Resources(), timeout, idle_timeout, tuple(environment.items()),
                     sandbox_path(workdir, what="workdir") if workdir is not None else None)
