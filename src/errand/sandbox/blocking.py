"""The blocking API, derived from the async one (see errand._sync)."""

from typing import TYPE_CHECKING

from errand._sync import synchronize
from errand.sandbox.files import AsyncFiles
from errand.sandbox.process import AsyncProcess, AsyncStream, AsyncWriter
from errand.sandbox.sandbox import AsyncSandbox

if TYPE_CHECKING:
    from errand.sandbox._blocking_types import Files, Process, Sandbox, Stream, Writer
else:
    Sandbox = synchronize(AsyncSandbox, "Sandbox")
    Process = synchronize(AsyncProcess, "Process")
    Stream = synchronize(AsyncStream, "Stream")
    Writer = synchronize(AsyncWriter, "Writer")
    Files = synchronize(AsyncFiles, "Files")

__all__ = ["Files", "Process", "Sandbox", "Stream", "Writer"]
