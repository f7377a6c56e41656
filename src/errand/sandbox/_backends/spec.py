"""What a backend needs to start one sandbox, gathered and validated by Sandbox.create."""

from __future__ import annotations

from dataclasses import dataclass, field

from errand.sandbox._images.layers import ImageConfig
from errand.sandbox.config import Mount, Resources
from errand.sandbox.network import Network

__all__ = ["SandboxSpec"]


@dataclass(frozen=True)
class SandboxSpec:
    id: str
    image: ImageConfig
    mounts: tuple[Mount, ...] = ()
    resources: Resources = field(default_factory=Resources)
    network: Network = field(default_factory=Network.none)
    timeout: float | None = 300.0
    idle_timeout: float | None = None
    workdir: str = "/"
    env: tuple[tuple[str, str], ...] = ()
    labels: tuple[tuple[str, str], ...] = ()
    detach: bool = False
    # Image build steps run as a root with a container-like capability set inside
    # the sandbox's own user namespace (chown, create users); user sandboxes never do.
    build_capabilities: bool = False
