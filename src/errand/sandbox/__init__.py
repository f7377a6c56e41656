"""errand.sandbox: isolated environments with an image, mounts, limits and an egress policy."""

from errand._sync import synchronize
from errand.sandbox.config import Mount, Resources
from errand.sandbox.files import AsyncFiles, FileInfo
from errand.sandbox.image import Image
from errand.sandbox.network import Network
from errand.sandbox.process import AsyncProcess, AsyncStream, AsyncWriter, ExecResult
from errand.sandbox.sandbox import AsyncSandbox, SandboxInfo

Sandbox = synchronize(AsyncSandbox, "Sandbox")
Process = synchronize(AsyncProcess, "Process")
Stream = synchronize(AsyncStream, "Stream")
Writer = synchronize(AsyncWriter, "Writer")
Files = synchronize(AsyncFiles, "Files")

__all__ = [
    "AsyncFiles", "AsyncProcess", "AsyncSandbox", "AsyncStream", "AsyncWriter", "ExecResult", "FileInfo",
    "Files", "Image", "Mount", "Network", "Process", "Resources", "Sandbox", "SandboxInfo", "Stream", "Writer",
]
