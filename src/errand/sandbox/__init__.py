"""errand.sandbox: isolated environments with an image, mounts, limits and an egress policy.

The names below are the package's face; each is imported when first asked for
(errand._lazy), so ``from errand.sandbox.config import Resources`` does not load
the backends.
"""

from typing import TYPE_CHECKING

from errand._lazy import face

if TYPE_CHECKING:
    from errand.sandbox._backends.gc import GcReport
    from errand.sandbox._backends.gc import collect as collect_garbage
    from errand.sandbox._egress.gateway import GATEWAY_URL
    from errand.sandbox._egress.ledger import EgressLedger
    from errand.sandbox._egress.proxy import EgressEvent
    from errand.sandbox.backend import SandboxUsage
    from errand.sandbox.blocking import Files, Process, Sandbox, Stream, Writer
    from errand.sandbox.config import Mount, Resources
    from errand.sandbox.files import AsyncFiles, FileInfo
    from errand.sandbox.image import Image
    from errand.sandbox.network import Network
    from errand.sandbox.process import AsyncProcess, AsyncStream, AsyncWriter, ExecResult
    from errand.sandbox.sandbox import AsyncSandbox, SandboxInfo
    from errand.sandbox.secret import Secret

_HOMES = {
    "GcReport": "_backends.gc", "collect_garbage": "_backends.gc:collect", "GATEWAY_URL": "_egress.gateway",
    "EgressLedger": "_egress.ledger", "EgressEvent": "_egress.proxy", "SandboxUsage": "backend",
    "Files": "blocking", "Process": "blocking", "Sandbox": "blocking", "Stream": "blocking", "Writer": "blocking",
    "Mount": "config", "Resources": "config", "AsyncFiles": "files", "FileInfo": "files", "Image": "image",
    "Network": "network", "AsyncProcess": "process", "AsyncStream": "process", "AsyncWriter": "process",
    "ExecResult": "process", "AsyncSandbox": "sandbox", "SandboxInfo": "sandbox", "Secret": "secret",
}

__all__ = [
    "GATEWAY_URL",
    "AsyncFiles",
    "AsyncProcess",
    "AsyncSandbox",
    "AsyncStream",
    "AsyncWriter",
    "EgressEvent",
    "EgressLedger",
    "ExecResult",
    "FileInfo",
    "Files",
    "GcReport",
    "Image",
    "Mount",
    "Network",
    "Process",
    "Resources",
    "Sandbox",
    "SandboxInfo",
    "SandboxUsage",
    "Secret",
    "Stream",
    "Writer",
    "collect_garbage",
]

if not TYPE_CHECKING:  # a type checker sees the names above, and no catch-all
    __getattr__ = face(__name__, _HOMES)
