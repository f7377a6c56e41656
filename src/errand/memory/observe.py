"""Self-population: memories from what errand observes, extracted deterministically.

The task engine calls these as things happen; each returns the memory stored
(or merged into), or ``None`` when there was nothing worth keeping.

- :func:`observe_command` — a setup/test/lint/build command as actually run.
  Exit 0: an active ``command`` memory ("the test command here is …"); seen
  again, it gains evidence instead of repeating. Exit 126/127 (not
  executable / not found): an active ``pitfall``, superseding a memory that
  said that command works (and a later exit 0 supersedes the pitfall). Other failures are the task's, not the command's
  (a failing test suite is not a wrong test command), and are not kept.
- :func:`observe_fix` — a command failed and then, after a change the agent
  made, passed: a ``pitfall`` with the fix. Observed (the pass is evidence),
  so active, but with the lower confidence of a one-off.
- :func:`observe_review` — a person's rejection reason or review comment:
  an active ``preference`` in the reviewer's own words, quoted as theirs.
- :func:`observe_followup` — a follow-up instruction: usually about that one
  change, so it is *proposed*, for a person to approve if it is general.

Observed facts go straight to active; whatever is inferred (the distiller,
follow-ups) starts proposed.
"""

from __future__ import annotations

import re
from typing import Literal

from errand.memory.records import Kind, Memory, Provenance, Status
from errand.memory.store import MemoryStore

__all__ = ["CommandKind", "observe_command", "observe_fix", "observe_followup", "observe_review"]

CommandKind = Literal["setup", "test", "lint", "build", "run"]
_NOT_RUNNABLE = {126: "is not executable here", 127: "is not found here"}
_MAX_COMMAND = 500
_MIN_REASON_WORDS = 3  # "no", "lol", "nope" are verdicts, not lessons


def observe_command(
    store: MemoryStore, project: str, command: str, exit_code: int, *, kind: CommandKind, task_id: str,
    event_id: int | None = None,
) -> Memory | None:
    """Remember a command that worked (or could not run at all); see the module docstring."""
    command = " ".join(command.split())
    if not command or len(command) > _MAX_COMMAND:
        return None
    provenance = Provenance.task(task_id, event_id, detail=f"{kind} command, exit {exit_code}")
    if exit_code == 0:
        # It runs now (a tool was installed, say): a pitfall saying it cannot run is superseded.
        stale = _find(store, project, Kind.PITFALL, _cannot_run(kind, command))
        return store.add(project, _works(kind, command), kind=Kind.COMMAND, provenance=provenance,
                         status=Status.ACTIVE, confidence=0.9, supersedes=stale.id if stale else None)
    if exit_code not in _NOT_RUNNABLE:
        return None
    stale = _find(store, project, Kind.COMMAND, _works(kind, command))
    return store.add(project, f"{_cannot_run(kind, command)} {_NOT_RUNNABLE[exit_code]} (exit {exit_code}).",
                     kind=Kind.PITFALL, provenance=provenance, status=Status.ACTIVE, confidence=0.9,
                     supersedes=stale.id if stale else None)


def observe_fix(
    store: MemoryStore, project: str, *, command: str, error: str, fix: str, task_id: str,
    event_id: int | None = None,
) -> Memory:
    """Remember that ``command`` failed with ``error`` until ``fix`` was applied (then it passed)."""
    error = _one_line(error, 200)
    text = f"`{' '.join(command.split())}` failed with \"{error}\"; what fixed it: {_one_line(fix, 400)}"
    return store.add(project, text, kind=Kind.PITFALL, provenance=Provenance.task(task_id, event_id, "fix"),
                     status=Status.ACTIVE, confidence=0.6)


def observe_review(store: MemoryStore, project: str, task_id: str, verdict: str, reason: str | None) -> Memory | None:
    """Remember why a reviewer rejected (or what they said about) a change; ``None`` for an empty or
    too-short reason, and for acceptances without a comment."""
    if not reason or len(re.findall(r"\w+", reason)) < _MIN_REASON_WORDS:
        return None
    said = _one_line(reason, 1000)
    if verdict == "rejected":
        text = f"A reviewer rejected a change, saying: \"{said}\""
    elif verdict == "accepted":
        text = f"A reviewer accepted a change, commenting: \"{said}\""
    else:
        return observe_followup(store, project, task_id, reason)
    return store.add(project, text, kind=Kind.PREFERENCE, provenance=Provenance.review(task_id, verdict),
                     status=Status.ACTIVE, confidence=0.8)


def observe_followup(store: MemoryStore, project: str, task_id: str, instruction: str) -> Memory | None:
    """Propose a follow-up instruction as a memory (a person approves it if it holds beyond that change)."""
    if len(re.findall(r"\w+", instruction)) < _MIN_REASON_WORDS:
        return None
    text = f"A reviewer asked for a follow-up: \"{_one_line(instruction, 1000)}\""
    return store.add(project, text, kind=Kind.PREFERENCE, provenance=Provenance.review(task_id, "followup"),
                     status=Status.PROPOSED, confidence=0.5)


def _works(kind: str, command: str) -> str:
    return f"The {kind} command that works here: `{command}`"


def _cannot_run(kind: str, command: str) -> str:
    return f"Do not use `{command}` to {kind}: it"


def _find(store: MemoryStore, project: str, kind: Kind, prefix: str) -> Memory | None:
    for memory in store.list_memories(project, kind=kind, status=Status.ACTIVE, limit=1000):
        if memory.text.startswith(prefix):
            return memory
    return None


def _one_line(text: str, limit: int) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"
