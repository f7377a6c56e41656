"""The worker that serves an errand home: its lock, what it says about itself, and stopping it.

One worker serves one errand home. It holds ``worker.lock`` (an flock, which
the kernel releases however the process ends) for its lifetime, and the file
holds its pid. Beside it the worker writes ``worker.json``: since when it runs,
how many tasks at a time, and what its environment holds of what tasks need —
the providers' base-URL variables, the named models it read, the names of the
variables it has, and a salted fingerprint of each key variable (never a key).

A task carries its own endpoint, so the worker's base URLs no longer decide
where a task goes; its keys still matter, because a worker reads a task's key
from its own environment. So a submission is checked against the running
worker: one that lacks the task's key variable is refused before anything is
created (:func:`check_serves`), and a key or endpoint variable that differs
from the submitter's is said at submission (:func:`notes`) and in the task's log.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import logging
import os
import signal
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import urlsplit

import errand
from errand import _settings
from errand.errors import ConfigError, ErrandError
from errand.models import Catalog, ModelEndpoint
from errand.models.endpoint import BASE_URL_VARIABLES, KEY_VARIABLES, fingerprint, fingerprint_matches
from errand.tasks.errors import EngineBusy

__all__ = ["EngineBusy", "WorkerInfo", "check_serves", "errand_code", "hold", "notes", "running_worker",
           "stop_worker", "worker_notes", "worker_running"]

log = logging.getLogger("errand.engine")

LOCK_FILE = "worker.lock"
INFO_FILE = "worker.json"
_POLL = 0.05


@dataclass(frozen=True)
class WorkerInfo:
    """What a running worker says about itself; only ``pid`` is certain to be known."""

    pid: int
    worker: str = ""
    started_at: float | None = None
    concurrency: int | None = None
    base_urls: Mapping[str, str] = field(default_factory=dict)  # provider base-URL variables it has
    keys: Mapping[str, str] = field(default_factory=dict)  # key variable -> salted fingerprint of its value
    models: Mapping[str, str] = field(default_factory=dict)  # the named models it read -> their endpoints
    variables: tuple[str, ...] | None = None  # the names of every variable it has (None: not known)
    code: str = ""  # a digest of the errand code it runs ("": an errand too old to say)
    isolation: str = ""  # the sandbox tier its tasks run on

    @classmethod
    def of_this_process(cls, worker: str, concurrency: int, environ: Mapping[str, str]) -> WorkerInfo:
        try:
            catalog = Catalog.load()
        except ConfigError as error:  # tasks carry their endpoints; a broken file must not stop the worker
            log.warning("errand's settings file cannot be read: %s", error.message)
            catalog = Catalog()
        key_variables = {name for names in KEY_VARIABLES.values() for name in names}
        key_variables |= {m.api_key_env for m in catalog.models.values() if m.api_key_env}
        return cls(
            pid=os.getpid(), worker=worker, started_at=time.time(), concurrency=concurrency,
            base_urls={name: _without_credentials(environ[name]) for names in BASE_URL_VARIABLES.values()
                       for name in names if environ.get(name)},
            keys={name: fingerprint(environ[name]) for name in sorted(key_variables) if environ.get(name)},
            models={name: model.describe() for name, model in sorted(catalog.models.items())},
            variables=tuple(sorted(environ)), code=errand_code(), isolation=_isolation(environ))

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> WorkerInfo:
        fields = {key: value for key, value in data.items() if key in cls.__dataclass_fields__}
        if fields.get("variables") is not None:
            fields["variables"] = tuple(fields["variables"])
        return cls(**fields)


def _without_credentials(url: str) -> str:
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    return parts._replace(netloc=f"***@{parts.hostname or ''}" + (f":{parts.port}" if parts.port else "")).geturl()


# ------------------------------------------------------------------ the lock


def lock_path() -> Path:
    path = _settings.home() / LOCK_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


@contextlib.contextmanager
def hold(info: WorkerInfo) -> Iterator[Path]:
    """Be this home's worker for the block; :class:`EngineBusy` if another one is."""
    path = lock_path()
    handle: TextIO = open(path, "a+")  # noqa: SIM115 - held for the engine's lifetime
    described = path.with_name(INFO_FILE)
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            owner = handle.read().strip() or "unknown"
            raise EngineBusy(f"another errand worker is running on {path.parent} (pid {owner}); "
                             "one worker serves one errand home (`errand worker status` says more)") from None
        # The record first, then the pid: whoever reads the pid finds the record written.
        _write_private(described, json.dumps(info.to_json(), indent=2))
        handle.seek(0)
        handle.truncate()
        handle.write(str(info.pid))
        handle.flush()
        try:
            yield Path(path)
        finally:
            described.unlink(missing_ok=True)  # before the lock goes: a successor's file is never removed
    finally:
        handle.close()


def _write_private(path: Path, text: str) -> None:
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(text)
    os.replace(partial, path)


def worker_running() -> bool:
    """Whether a worker holds this errand home's lock."""
    with open(lock_path(), "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
    return False


def running_worker() -> WorkerInfo | None:
    """The worker serving this home, or None. Its pid is 0 in the moment after it took the
    lock and before it wrote the pid."""
    if not worker_running():
        return None
    path = lock_path()
    text = path.read_text().strip()
    pid = int(text) if text.isdigit() else 0
    try:
        info = WorkerInfo.from_json(json.loads(path.with_name(INFO_FILE).read_text()))
    except (OSError, ValueError, TypeError):
        return WorkerInfo(pid=pid)  # starting, or a worker of an errand that wrote no record
    return info if info.pid == pid else WorkerInfo(pid=pid)


def stop_worker(timeout: float = 60.0) -> WorkerInfo | None:
    """SIGTERM this home's worker and wait until it has let go of the lock (its runs were
    requeued and its sandboxes ended by then). None when no worker runs."""
    deadline = time.monotonic() + timeout
    info = running_worker()
    while info is not None and info.pid == 0 and time.monotonic() < deadline:
        time.sleep(_POLL)
        info = running_worker()
    if info is None:
        return None
    if info.pid == 0:
        raise ErrandError(f"a worker holds {lock_path()} but has not written its pid", code="worker_unknown")
    with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
        os.kill(info.pid, signal.SIGTERM)
    while worker_running():
        if time.monotonic() > deadline:
            raise ErrandError(f"the worker (pid {info.pid}) did not stop within {timeout:g} s; it may still be "
                              f"ending its sandboxes. `kill -KILL {info.pid}` ends it at once (its runs are then "
                              "requeued when a worker next starts)", code="worker_stop_timeout")
        time.sleep(_POLL)
    return info


# ------------------------------------------------------------------ submissions


def check_serves(endpoint: ModelEndpoint, info: WorkerInfo | None) -> None:
    """Refuse, before a task is created, a model whose key variable the running worker lacks:
    the worker reads the key from its own environment and would fail the task."""
    variable = endpoint.api_key_env
    if info is None or variable is None or info.variables is None or variable in info.variables:
        return
    raise ConfigError(f"the running errand worker (pid {info.pid}) was started without ${variable}, the key "
                      f"variable of {endpoint.describe()}, so it could not run this task. Stop it with "
                      f"`errand worker stop` and run again from an environment that has ${variable} (a new "
                      "worker starts with that environment)", code="worker_lacks_key")


@functools.lru_cache(maxsize=1)
def errand_code() -> str:
    """A digest of the errand code this process runs (its sources, the native ones included):
    a worker started before an upgrade runs other code than the ``errand run`` that hands it
    a task, and a person should be told."""
    root = Path(errand.__file__).parent
    digest = hashlib.sha256(errand.__version__.encode())
    for path in sorted(p for p in root.rglob("*") if p.suffix in (".py", ".c", ".h") and p.is_file()):
        digest.update(f"\0{path.relative_to(root)}\0".encode())
        digest.update(path.read_bytes())
    return f"{errand.__version__}+{digest.hexdigest()[:12]}"


def _isolation(environ: Mapping[str, str]) -> str:
    return environ.get("ERRAND_ISOLATION") or "namespace"


def worker_notes(info: WorkerInfo, environ: Mapping[str, str]) -> list[str]:
    """Where the running worker differs from this process whatever the task: its code, its tier."""
    said = []
    if info.code != errand_code():
        theirs = f"errand {info.code}" if info.code else "an errand that does not say which"
        said.append(f"the running worker (pid {info.pid}) runs {theirs}, not this errand {errand_code()}; "
                    "it serves the task with its own code. `errand worker stop` and run again to use this one")
    if info.isolation and info.isolation != _isolation(environ):
        said.append(f"the running worker (pid {info.pid}) runs tasks on {info.isolation} sandboxes, not "
                    f"{_isolation(environ)} as ERRAND_ISOLATION says here. `errand worker stop` and run again")
    return said


def notes(endpoint: ModelEndpoint, info: WorkerInfo, environ: Mapping[str, str]) -> list[str]:
    """What a person handing ``endpoint`` to the running worker should know: a key that is not
    theirs, base-URL variables set otherwise than in their environment (which the task's own
    endpoint overrides)."""
    said = []
    variable = endpoint.api_key_env
    key = environ.get(variable) if variable else None
    theirs = info.keys.get(variable) if variable else None
    if key and theirs and not fingerprint_matches(theirs, key):
        said.append(f"the running worker (pid {info.pid}) has another ${variable} than this environment; it will "
                    f"use its own for this task. `errand worker stop` and run again to use yours")
    if endpoint.name is None and endpoint.provider in BASE_URL_VARIABLES:
        for name in BASE_URL_VARIABLES[endpoint.provider]:
            mine = _without_credentials(environ.get(name, ""))
            if info.base_urls.get(name, "") != mine:
                said.append(f"the running worker (pid {info.pid}) was started with {name}="
                            f"{info.base_urls.get(name) or '(unset)'}; this task records and uses "
                            f"{endpoint.base_url}, from this environment")
                break
    return said
