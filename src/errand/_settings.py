"""Where errand keeps things, read from the environment when asked (never at import)."""

from __future__ import annotations

import fcntl
import functools
import hashlib
import os
import re
import secrets
import socket
from pathlib import Path

# In-sandbox ids 0..65535 map onto host ids starting here: far above ordinary
# users and the usual subordinate-id ranges, so a process that escaped every
# namespace would still hold no host user's files.
DEFAULT_SANDBOX_UID = 0x70000000


def home() -> Path:
    """errand's data directory: images, layers, the task store (``ERRAND_HOME``)."""
    environ = os.environ
    return _home(environ.get("ERRAND_HOME"), environ.get("XDG_DATA_HOME"), environ.get("HOME"))


# The paths below are kept per the values they are made from, read afresh at each call: a create
# asks for them over a dozen times, and making them each time (paths built, ~ expanded, hashed)
# was ~9% of errand's own CPU per sandbox.
@functools.lru_cache(maxsize=16)
def _home(explicit: str | None, data: str | None, user_home: str | None) -> Path:
    # ``user_home`` is what expanduser reads: only part of the key.
    if explicit:
        return Path(explicit)
    return Path(data or os.path.expanduser("~/.local/share")) / "errand"


def home_tag() -> str:
    """A short tag naming this errand home (its resolved path, hashed)."""
    return _tag(resolved_home())


@functools.lru_cache(maxsize=16)
def _tag(resolved: str) -> str:
    return hashlib.sha256(resolved.encode()).hexdigest()[:12]


def home_id(home_path: Path | None = None) -> str:
    """The random name this errand home (default: this process's) was given when first asked,
    kept in it as ``id``. Its host name and path do not tell two homes apart where containers
    share the host's network (one host name) and each mounts a volume of its own at the same
    path; their ids do, and a home keeps its id across restarts and moves."""
    path = Path(home_path if home_path is not None else home()) / "id"
    known = _read_id(path)
    if known:
        return known
    if known is None:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = _written_id(path)
        try:
            os.link(partial, path)  # the first to name it wins; every other caller reads the winner's
            named = True
        except FileExistsError:
            named = False
        finally:
            partial.unlink()
        if named:
            _sync_directory(path.parent)  # the name too: lost to a crash, the home would take another id
        known = _read_id(path)
        if known:
            return known
    # Empty or cut short: a crash after the name reached the disk and before its content did. Named
    # again, under a lock on the home, so that the processes finding it so all take one new name.
    directory = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(directory, fcntl.LOCK_EX)
        if not _read_id(path):
            os.replace(_written_id(path), path)
            os.fsync(directory)
        return _read_id(path) or ""
    finally:
        os.close(directory)


def _read_id(path: Path) -> str | None:
    """The home's id as its file holds it: None when there is no file, "" when it is not an id."""
    try:
        text = path.read_text(errors="replace").strip()
    except FileNotFoundError:
        return None
    return text if re.fullmatch(r"[0-9a-f]{16}", text) else ""


def _sync_directory(directory: Path) -> None:
    handle = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


def _written_id(path: Path) -> Path:
    """A new id in a file of its own beside ``path``, on the disk before it is given that name."""
    partial = path.with_name(f".id.{os.getpid()}.{secrets.token_hex(4)}")
    try:
        with open(partial, "w", encoding="ascii") as handle:
            handle.write(secrets.token_hex(8) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        partial.unlink(missing_ok=True)  # a disk full or over quota: no half-written file left at each start
        raise
    return partial


def home_identity(home_path: Path | None = None) -> str:
    """An errand home (default: this process's) as the task store and Temporal know it:
    "<host>:<path>#<id>" (its id: :func:`home_id`). A worker that finds another's lease with its
    own home's identity knows that one ended, since it holds the home's lock now."""
    path = resolved_home() if home_path is None else str(home_path.resolve())
    return f"{socket.gethostname()}:{path}#{home_id(home_path)}"


def resolved_home() -> str:
    """This errand home's path, symlinks resolved (once per home and working directory: a
    home's symlink pointed elsewhere while errand runs is not seen until it restarts)."""
    path = home()
    return _resolved(str(path), "" if path.is_absolute() else os.getcwd())


@functools.lru_cache(maxsize=16)
def _resolved(home: str, cwd: str) -> str:
    # Kept: resolving it took a sixth of a warm pool's claim (four times a claim).
    return str(Path(cwd, home).resolve())


def config_path() -> Path:
    """errand's settings file (named models and the default model): ``config.toml`` in its home."""
    return home() / "config.toml"


def eval_runs_dir() -> Path:
    """Where ``errand eval`` keeps its runs unless told (``ERRAND_EVAL_RUNS``): the home's
    ``eval-runs``, which is also where ``errand serve``'s eval pages look."""
    explicit = os.environ.get("ERRAND_EVAL_RUNS")
    return Path(explicit) if explicit else home() / "eval-runs"


def runtime_dir() -> Path:
    """Live sandboxes' control sockets and records (``ERRAND_RUNTIME_DIR``).

    One per errand home by default, ``/run/errand/<home tag>``, so a home lists,
    ends and reaps only its own sandboxes. A hash and not the home's path keeps
    it short: Unix socket paths are limited to 107 bytes.
    """
    explicit = os.environ.get("ERRAND_RUNTIME_DIR")
    return _path(explicit) if explicit else _path(f"/run/errand/{home_tag()}")


@functools.lru_cache(maxsize=16)
def _path(text: str) -> Path:
    return Path(text)


def cache_dir() -> Path:
    """What a home caches and may lose: the tests' results on base commits.

    Under the home when ``ERRAND_HOME`` names one, so two homes never share a
    result; the user's cache directory for the default home, or ``ERRAND_CACHE_DIR``.
    """
    if os.environ.get("ERRAND_HOME") and not os.environ.get("ERRAND_CACHE_DIR"):
        return home() / "cache"
    return user_cache_dir()


def user_cache_dir() -> Path:
    """What every home of this user shares (``ERRAND_CACHE_DIR``): compiled helpers. They
    are named by their sources' hash and hold no home's data, so one build serves all."""
    explicit = os.environ.get("ERRAND_CACHE_DIR")
    if explicit:
        return Path(explicit)
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(cache) / "errand"


def cgroup_scope() -> str:
    """A short tag for this runtime directory and home, prefixed to its sandboxes' cgroup names.

    cgroups are machine-wide; runtime directories are not. gc reaps only the
    groups of its own scope, so two errand installations (or two test sessions)
    on one machine never reap each other's sandboxes. The home's id is part of it:
    containers that share the host's cgroups, each with a home of its own at the
    same path, have one runtime directory path (each its own /run) and would
    otherwise take each other's sandboxes for orphans.
    """
    return _scope(str(runtime_dir().resolve()), resolved_home())


@functools.lru_cache(maxsize=16)
def _scope(runtime: str, home_path: str) -> str:
    # Kept: it is on the path of every create, and the home's id is a file.
    return hashlib.sha256(f"{runtime}#{home_id(Path(home_path))}".encode()).hexdigest()[:8]


def legacy_cgroup_scope() -> str:
    """The scope errand named cgroups with before the home's id was part of it: gc still reaps
    that scope's orphans, left by an errand of before, as it did then."""
    return hashlib.sha256(str(runtime_dir().resolve()).encode()).hexdigest()[:8]


def sandbox_uid() -> int:
    return int(os.environ.get("ERRAND_SANDBOX_UID") or DEFAULT_SANDBOX_UID)
