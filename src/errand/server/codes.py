"""errand's errors on the wire: one table, read by the server and by its client.

The server answers an :class:`~errand.errors.ErrandError` with the status this table
gives its class (or its code) and a problem document carrying the error's ``code`` and
structured fields; :class:`~errand.server.client.ErrandClient` rebuilds the same class
from that document, so a caller of the remote API catches what a caller of the local
service catches. Adding an error here is the one change both sides need.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from errand.database import StoreUnreachable
from errand.errors import BackendUnavailable, ConfigError, ErrandError, SandboxNotFound, SandboxTerminated
from errand.memory.errors import InvalidMemory, MemoryNotFound, SecretRefused
from errand.server.errors import ServerError
from errand.tasks.errors import (
    IllegalTransition,
    NeedsConfirmation,
    RunNotFound,
    RunNotRunning,
    StateConflict,
    TaskError,
    TaskNotFound,
    WrongState,
)

__all__ = ["FIELDS", "ServerError", "error_from", "fields_of", "status_of"]

# The classes a problem document names, with their statuses. A subclass is matched by
# its own row before its parent's: the client rebuilds the first row whose code matches.
ERRORS: tuple[tuple[type[ErrandError], int], ...] = (
    (TaskNotFound, 404),
    (RunNotFound, 404),
    (SandboxNotFound, 404),
    (SandboxTerminated, 404),
    (MemoryNotFound, 404),
    (WrongState, 409),
    (NeedsConfirmation, 409),
    (IllegalTransition, 409),
    (StateConflict, 409),
    (RunNotRunning, 409),
    (InvalidMemory, 422),
    (SecretRefused, 422),
    (ConfigError, 422),
    (BackendUnavailable, 503),
    (StoreUnreachable, 503),
)
# Errors known by code alone (raised as a base class with their own code).
CODE_STATUS: Mapping[str, int] = {"no_result": 409, "engine_busy": 503, "patch_failed": 409,
                                  "csrf_failed": 403, "model_not_allowed": 422}
# The structured fields a problem document carries beside ``detail`` and ``code``.
FIELDS = ("task_id", "run_id", "sandbox_id", "state", "current", "target", "expected", "actual", "memory_id",
          "detector", "reasons")


def status_of(error: ErrandError) -> int:
    for kind, status in ERRORS:
        if isinstance(error, kind):
            return status
    return CODE_STATUS.get(error.code, 400)


def fields_of(error: ErrandError) -> dict[str, object]:
    """The error's structured fields, as plain JSON values."""
    return {name: _plain(value) for name in FIELDS if (value := getattr(error, name, None)) is not None}


def error_from(status: int, problem: Mapping[str, Any]) -> ErrandError:
    """The error a problem document describes: its class rebuilt where the table knows its
    code, else the nearest family (bad input, a task's error, the server's)."""
    detail, code = str(problem.get("detail") or ""), str(problem.get("code") or "")
    fields = {name: problem[name] for name in FIELDS if problem.get(name) is not None}
    for kind, _status in ERRORS:
        if kind.code == code and (error := _built(kind, detail, code, fields)) is not None:
            return error
    if status == 422:
        return ConfigError(detail, code=code or None)
    if "task_id" in fields:
        return TaskError(detail, task_id=str(fields["task_id"]), code=code or None)
    return ServerError(detail, code=code or "server_error")


def _built(kind: type[ErrandError], detail: str, code: str, fields: Mapping[str, Any]) -> ErrandError | None:
    """``kind(detail, **its keyword fields)``; None when the document lacks one it requires."""
    given: dict[str, Any] = {}
    for name, parameter in list(inspect.signature(kind.__init__).parameters.items())[2:]:
        if parameter.kind is not inspect.Parameter.KEYWORD_ONLY:
            continue
        if name in fields:
            given[name] = fields[name]
        elif name == "code" and code != kind.code:
            given[name] = code
        elif parameter.default is inspect.Parameter.empty:
            return None
    return kind(detail, **given)


def _plain(value: object) -> object:
    if isinstance(value, list | tuple):
        return [str(item) for item in value]
    return value if isinstance(value, int | float | bool) else str(value)
