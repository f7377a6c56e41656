"""errand: background coding agents in secure sandboxes, with project memory.

The sandbox's names here are imported when first asked for (errand._lazy): every
``errand`` command imports this package, and most never start a sandbox.
"""

from typing import TYPE_CHECKING

from errand._lazy import face
from errand.errors import (
    BackendUnavailable,
    ConfigError,
    ErrandError,
    ExecTimeout,
    FilesError,
    ImageBuildError,
    SandboxError,
    SandboxNotFound,
    SandboxTerminated,
)

if TYPE_CHECKING:
    from errand.sandbox import (
        AsyncProcess,
        AsyncSandbox,
        ExecResult,
        FileInfo,
        Image,
        Mount,
        Network,
        Process,
        Resources,
        Sandbox,
        Secret,
    )

__version__ = "0.1.0"

__all__ = [
    "AsyncProcess",
    "AsyncSandbox",
    "BackendUnavailable",
    "ConfigError",
    "ErrandError",
    "ExecResult",
    "ExecTimeout",
    "FileInfo",
    "FilesError",
    "Image",
    "ImageBuildError",
    "Mount",
    "Network",
    "Process",
    "Resources",
    "Sandbox",
    "SandboxError",
    "SandboxNotFound",
    "SandboxTerminated",
    "Secret",
    "__version__",
]

_SANDBOX = ("AsyncProcess", "AsyncSandbox", "ExecResult", "FileInfo", "Image", "Mount", "Network", "Process",
            "Resources", "Sandbox", "Secret")
if not TYPE_CHECKING:  # a type checker sees the names above, and no catch-all
    __getattr__ = face(__name__, {name: "sandbox" for name in _SANDBOX})
