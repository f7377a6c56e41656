"""errand: background coding agents in secure sandboxes, with project memory."""

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
