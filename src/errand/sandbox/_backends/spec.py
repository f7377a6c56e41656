"""What crosses the backend seam: the spec a sandbox starts from (gathered and validated by
``AsyncSandbox.create``), and what a backend hands back once it started it."""

from __future__ import annotations

import socket
import subprocess
from dataclasses import dataclass, field

from errand.sandbox._backends.registry import Record
from errand.sandbox._egress.intercept import Interceptor
from errand.sandbox._images.layers import ImageConfig
from errand.sandbox.config import Mount, Resources
from errand.sandbox.network import Network

__all__ = ["GATEWAY_PORT", "PROXY_PORT", "SandboxSpec", "Started"]

# Where, inside the sandbox's network namespace, the egress proxy's listener listens.
PROXY_PORT = 3128
# Where a sandbox created with a gateway reaches it (relayed to the gateway's host socket).
GATEWAY_PORT = 3129


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
    # The model gateway's host socket ("127.0.0.1:PORT" or a Unix socket's path), relayed from
    # 127.0.0.1:GATEWAY_PORT inside; None: no gateway.
    gateway: str | None = None
    # The sandbox's declared secrets and its CA, for the egress proxy (this process's memory only).
    interceptor: Interceptor | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class Started:
    """A sandbox a backend just started, as its creator holds it."""

    record: Record  # what any process attaches by (saved in the registry)
    process: subprocess.Popen[bytes]  # the launcher, this process's child
    # Where the launcher sends the egress proxy's listener once the sandbox's network
    # namespace has it; None when the sandbox has no proxy (detached, Network.none()).
    proxy_channel: socket.socket | None
