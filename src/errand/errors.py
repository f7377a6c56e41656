"""errand's errors: one base class and a small tree beneath it.

Every error errand raises on purpose is an :class:`ErrandError`. Branch on the
class or on ``.code`` (a stable, machine-readable string), never on the message,
which is written for people and may change. This module holds the sandbox's
errors; each other layer keeps its own in its ``errors`` module, and the whole
tree is drawn here (a test holds the drawing to the classes)::

    ErrandError
    ├── ConfigError              bad input: a value object, path or option was rejected;
    │   │                        nothing was created
    │   └── EvalError            an evaluation's dataset or options are wrong   (eval.errors)
    ├── BackendUnavailable       an isolation backend cannot run on this machine
    ├── StoreUnreachable         the database could not be reached, or was lost mid-transaction (database)
    ├── ImageBuildError          an image build step failed (carries the step and its log)
    ├── SandboxError             something went wrong with a particular sandbox
    │   ├── SandboxNotFound      no live sandbox has that id
    │   ├── SandboxTerminated    the sandbox ended (terminated, timed out, owner died)
    │   ├── ExecTimeout          a command ran past its own timeout and was killed
    │   └── FilesError           a files-API call failed (carries the path and errno)
    ├── ModelError               a model provider refused or failed a call      (models.errors)
    ├── GatewayError             the model gateway refused a grant              (gateway.errors)
    ├── RepoError                a repository, working copy or accept failed    (repo.errors)
    ├── MemoryStoreError         project memory refused a change                (memory.errors)
    │   ├── MemoryNotFound       no memory has that id
    │   ├── InvalidMemory        the memory's text or fields are not acceptable
    │   └── SecretRefused        the text looks like a secret; nothing was stored
    ├── TaskError                a task or run could not be changed as asked    (tasks.errors)
    │   ├── TaskNotFound         no task has that id
    │   ├── IllegalTransition    the lifecycle forbids ``current → target``
    │   ├── StateConflict        the task was not in the state the caller expected
    │   ├── WrongState           the task's state does not allow the action
    │   ├── RunNotFound          no run has that id
    │   ├── RunNotRunning        the run has already ended
    │   ├── NeedsConfirmation    the action needs a person's confirm first (its reasons)
    │   └── StaleStart           a round's start came after its task moved on
    ├── SetupFailed              a setup command of errand.toml failed          (tasks.errors)
    ├── EngineBusy               another worker already serves this home        (tasks.errors)
    │   └── EnginesMixed         the store is served by the other engine
    ├── ForgeError               a forge (GitHub...) refused or failed a call   (forge.errors)
    ├── ServerError              the server is unreachable or not errand's API  (server.errors)
    └── CsrfError                a form post without its CSRF token was refused (server.errors)
"""

from __future__ import annotations

__all__ = [
    "BackendUnavailable",
    "ConfigError",
    "ErrandError",
    "ExecTimeout",
    "FilesError",
    "ImageBuildError",
    "SandboxError",
    "SandboxNotFound",
    "SandboxTerminated",
]


class ErrandError(Exception):
    """Base of every error errand raises on purpose."""

    code: str = "errand_error"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


class ConfigError(ErrandError):
    """Bad input was rejected before anything was created."""

    code = "invalid_config"


class BackendUnavailable(ErrandError):
    """An isolation backend cannot run here (a missing program or kernel feature)."""

    code = "backend_unavailable"


class ImageBuildError(ErrandError):
    """An image build step failed; ``log`` holds what it printed."""

    code = "image_build_failed"

    def __init__(self, message: str, *, step: str, log: str = "", exit_code: int | None = None) -> None:
        super().__init__(message)
        self.step = step
        self.log = log
        self.exit_code = exit_code


class SandboxError(ErrandError):
    """An error about one sandbox, named by ``sandbox_id``."""

    code = "sandbox_error"

    def __init__(self, message: str, *, sandbox_id: str | None = None, code: str | None = None) -> None:
        super().__init__(message, code=code)
        self.sandbox_id = sandbox_id


class SandboxNotFound(SandboxError):
    """No live sandbox has this id."""

    code = "sandbox_not_found"


class SandboxTerminated(SandboxError):
    """The sandbox has ended; it can no longer run commands or serve files. ``terminated_by`` names
    who ended it from outside its owner (``errand sandbox rm``, the sandboxes page), if someone did."""

    code = "sandbox_terminated"

    def __init__(self, message: str, *, sandbox_id: str | None = None, terminated_by: str | None = None) -> None:
        super().__init__(message, sandbox_id=sandbox_id)
        self.terminated_by = terminated_by


class ExecTimeout(SandboxError):
    """A command ran past its timeout and was killed."""

    code = "exec_timeout"

    def __init__(self, message: str, *, sandbox_id: str | None = None, timeout: float) -> None:
        super().__init__(message, sandbox_id=sandbox_id)
        self.timeout = timeout


class FilesError(SandboxError):
    """A files-API call failed; ``path`` and ``errno`` say where and why."""

    code = "files_error"

    def __init__(
        self, message: str, *, sandbox_id: str | None = None, path: str, errno: int | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message, sandbox_id=sandbox_id, code=code)
        self.path = path
        self.errno = errno
