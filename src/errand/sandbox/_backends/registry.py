"""Records of live sandboxes, kept in the runtime directory, and their reaping.

Each sandbox has ``<runtime>/<id>/`` holding its control socket, its record
(``record.json``) and its log. A sandbox whose owning process or whose own
processes are gone is an orphan; ``gc`` ends what is left of it.

A record names the errand home that made it. Each home has a runtime directory
of its own by default, but two homes pointed at one ``ERRAND_RUNTIME_DIR`` still
see only their own sandboxes: :func:`records` and :meth:`Record.load` skip the
others' (gc keeps clear of them too).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import logging
import os
import shutil
import threading
from dataclasses import dataclass, field
from pathlib import Path

from errand import _settings

_log = logging.getLogger(__name__)

__all__ = ["ORPHAN_GRACE", "OWNER_GRACE", "Record", "all_records", "ended_by", "forget_ended", "mark_ended",
           "pidfd_of", "process_start", "process_stat", "prune_ended", "records", "same_process"]

# Who ends a sandbox at its lifetime, in order: its agent inside at the deadline; its owner
# this long after (the agent runs where a process could stop it); garbage collection, for
# a sandbox whose owner is gone too, only after the owner has had its turn.
OWNER_GRACE = 1.0
ORPHAN_GRACE = OWNER_GRACE + 4.0


# Records whose saves were put off (save_soon), by sandbox id.
_unsaved: dict[str, Record] = {}
_unsaved_lock = threading.RLock()


def settle() -> None:
    """Write this process's records whose saves were put off (:meth:`Record.save_soon`). One that
    cannot be written is logged, and fails nothing else: this is called before reading, saving or
    removing any record, and the claim that put it off has returned."""
    with _unsaved_lock:
        while _unsaved:
            record = _unsaved.pop(next(iter(_unsaved)))
            try:
                _write(record.directory, json.dumps(vars(record)).encode())
            except FileNotFoundError:
                pass  # ended (and its directory removed) before it was written
            except OSError as error:
                _log.warning("sandbox %s: its record could not be saved: %s", record.id, error)


# A process that ends before its loop turns again (or whose loop closed) still writes them.
atexit.register(settle)


def _write(directory: Path, data: bytes) -> None:
    # A new file each time, put in place at once: a reader that opened the last one reads it whole.
    partial = directory / ".record.json"
    partial.write_bytes(data)
    os.replace(partial, directory / "record.json")


def _this_home() -> str:
    return _settings.resolved_home()


@dataclass
class Record:
    id: str
    backend: str
    pid: int                      # the sandbox's outermost process on the host
    pid_start: int                # its start time, so a reused pid is not mistaken for it
    owner_pid: int | None         # None for detached sandboxes
    owner_start: int | None
    created_at: float
    deadline: float | None        # lifetime end (wall clock), if any
    image: dict[str, object]      # the ImageConfig as JSON fields
    workdir: str
    env: dict[str, str]
    copy_layers: list[str] = field(default_factory=list)
    cgroup: str = ""
    proxied: bool = False         # served by the owner's egress proxy at 127.0.0.1:3128 inside
    labels: dict[str, str] = field(default_factory=dict)
    # The home that made it. A record written before homes were recorded has none, and
    # is taken for this home's: its runtime directory was then the only scope there was.
    home: str = field(default_factory=_this_home)

    @property
    def directory(self) -> Path:
        return _settings.runtime_dir() / self.id

    @property
    def control_socket(self) -> str:
        return str(self.directory / "ctl")

    def save(self) -> None:
        with _unsaved_lock:  # the saves this process put off land first: the last one called is kept
            _unsaved.pop(self.id, None)
            settle()
            _write(self.directory, json.dumps(vars(self)).encode())  # JSON's own fields: no asdict copy

    def save_soon(self, delay: float) -> None:
        """:meth:`save`, ``delay`` seconds from now on the running event loop, so the caller and
        what it does next do not wait for the write (a warm pool's claim and its first command:
        ~0.2–0.5 ms here when ext4's journal is busy). This process's own reads, saves and
        removal of records write it first, and so does its exit; other processes see it once
        the loop has turned after ``delay``."""
        with _unsaved_lock:
            _unsaved[self.id] = self
        asyncio.get_running_loop().call_later(delay, settle)

    @classmethod
    def load(cls, sandbox_id: str) -> Record | None:
        """This home's record of ``sandbox_id``, or None (none, unreadable, or another home's)."""
        settle()
        record = cls._read(sandbox_id)
        return record if record is not None and record.of_this_home() else None

    @classmethod
    def _read(cls, sandbox_id: str) -> Record | None:
        path = _settings.runtime_dir() / sandbox_id / "record.json"
        try:
            return cls(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def of_this_home(self) -> bool:
        return self.home == _this_home()

    def processes_alive(self) -> bool:
        return same_process(self.pid, self.pid_start)

    def owner_alive(self) -> bool:
        if self.owner_pid is None:
            return True
        return same_process(self.owner_pid, self.owner_start)

    def log_tail(self, limit: int = 4000) -> str:
        try:
            return (self.directory / "log").read_text(errors="replace")[-limit:]
        except OSError:
            return ""

    def remove_files(self) -> None:
        settle()
        shutil.rmtree(self.directory, ignore_errors=True)
        for layer in self.copy_layers:
            shutil.rmtree(layer, ignore_errors=True)


# Who ended a sandbox from outside its owner (`errand sandbox rm`, the sandboxes page): one small
# file per sandbox, beside the sandboxes' directories (which their cleanup removes), so the owner
# can tell its task that a person ended it. Its owner forgets it when it ends the sandbox itself; gc
# removes any left this long after.
ENDED_KEPT = 86_400.0


def _ended_dir() -> Path:
    return _settings.runtime_dir() / "ended"


def mark_ended(sandbox_id: str, by: str) -> None:
    folder = _ended_dir()
    partial = folder / f".{sandbox_id}"
    for tries_left in reversed(range(_MARK_TRIES)):
        folder.mkdir(parents=True, exist_ok=True)
        try:
            partial.write_text(by)
            os.replace(partial, folder / sandbox_id)
            return
        except FileNotFoundError:
            # Another sandbox's end removed the folder while it was empty, between the mkdir and
            # the write: made again. (Raised, the terminate that called this would not have killed.)
            if not tries_left:
                raise


_MARK_TRIES = 5


def ended_by(sandbox_id: str) -> str | None:
    """Who ended ``sandbox_id`` from outside its owner, as :func:`mark_ended` wrote it; None if no one did."""
    try:
        return (_ended_dir() / sandbox_id).read_text(errors="replace").strip() or None
    except OSError:
        return None


def forget_ended(sandbox_id: str) -> None:
    (_ended_dir() / sandbox_id).unlink(missing_ok=True)
    _remove_if_empty(_ended_dir())


def prune_ended(now: float) -> None:
    folder = _ended_dir()
    for marker in folder.iterdir() if folder.is_dir() else []:
        with contextlib.suppress(OSError):
            if now - marker.stat().st_mtime > ENDED_KEPT:
                marker.unlink()
    _remove_if_empty(folder)


def _remove_if_empty(folder: Path) -> None:
    with contextlib.suppress(OSError):  # not empty (another marker), or gone already
        folder.rmdir()


def process_start(pid: int) -> int | None:
    """The kernel's start time of ``pid`` (clock ticks since boot), or None if gone."""
    fields = process_stat(pid)
    if fields is None or fields[0] == b"Z":
        return None  # a zombie has ended; only its parent's wait is missing
    return int(fields[19])


def process_stat(pid: int) -> list[bytes] | None:
    """``/proc/<pid>/stat`` after the command name (state, parent, ...), or None if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return None
    # The command name may hold spaces or parentheses: split after the last ')'.
    return stat[stat.rindex(b")") + 2:].split()


def pidfd_of(pid: int, *, start: int | None = None, parent: int | None = None) -> int | None:
    """A descriptor of ``pid``, checked after it was opened to be the process meant (its start
    time, or its parent), so a reused pid is never signalled; None if it is not, or has ended
    (a zombie: there is nothing left to signal)."""
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return None
    stat = process_stat(pid)
    meant = stat is not None and stat[0] != b"Z" and (start is None or int(stat[19]) == start) and (
        parent is None or int(stat[1]) == parent)
    if not meant:
        os.close(pidfd)
        return None
    return pidfd


def same_process(pid: int, start: int | None) -> bool:
    return start is not None and process_start(pid) == start


def records() -> list[Record]:
    """This home's sandboxes' records."""
    return [record for record in all_records() if record.of_this_home()]


def all_records() -> list[Record]:
    """Every record in the runtime directory, other homes' too: what gc must keep clear of."""
    root = _settings.runtime_dir()
    if not root.is_dir():
        return []
    settle()  # once for the whole listing, not per record
    found = []
    for entry in sorted(root.iterdir()):
        record = Record._read(entry.name) if entry.is_dir() else None
        if record is not None:
            found.append(record)
    return found
