"""errand.sandbox: isolated environments with an image, mounts, limits and an egress policy."""

from typing import TYPE_CHECKING

from errand._sync import synchronize
from errand.sandbox._backends.gc import GcReport
from errand.sandbox._backends.gc import collect as collect_garbage
from errand.sandbox._egress.gateway import GATEWAY_URL
from errand.sandbox._egress.ledger import EgressLedger
from errand.sandbox._egress.proxy import EgressEvent
from errand.sandbox.backend import SandboxUsage
from errand.sandbox.config import Mount, Resources
from errand.sandbox.files import AsyncFiles, FileInfo
from errand.sandbox.image import Image
from errand.sandbox.network import Network
from errand.sandbox.process import AsyncProcess, AsyncStream, AsyncWriter, ExecResult
from errand.sandbox.sandbox import AsyncSandbox, SandboxInfo
from errand.sandbox.secret import Secret

if TYPE_CHECKING:
    from errand.sandbox._blocking_types import Files, Process, Sandbox, Stream, Writer
else:
    # The blocking API, derived from the async one (see errand._sync).
    Sandbox = synchronize(AsyncSandbox, "Sandbox")
    Process = synchronize(AsyncProcess, "Process")
    Stream = synchronize(AsyncStream, "Stream")
    Writer = synchronize(AsyncWriter, "Writer")
    Files = synchronize(AsyncFiles, "Files")

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
