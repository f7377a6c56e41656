"""The memory layer's value objects: kinds, statuses, provenance, memories, recall results."""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from errand.memory.errors import InvalidMemory

__all__ = ["ArchiveReason", "Kind", "Memory", "Provenance", "Recalled", "Source", "Status", "project_key"]


class Kind(enum.StrEnum):
    INSTRUCTION = "instruction"  # what the project's own instruction files say
    COMMAND = "command"  # a command that works here (setup, test, lint)
    CONVENTION = "convention"  # how code is written here
    PITFALL = "pitfall"  # something that went wrong, and how to avoid it
    PREFERENCE = "preference"  # what reviewers want (and reject)
    FACT = "fact"  # anything else true about the project


class Status(enum.StrEnum):
    PROPOSED = "proposed"  # inferred; waits for a person to approve, edit or reject it
    ACTIVE = "active"  # given to agents
    ARCHIVED = "archived"  # kept for the record (and to stop it being proposed again), never given


class ArchiveReason(enum.StrEnum):
    REJECTED = "rejected"  # a person rejected the proposal
    SUPERSEDED = "superseded"  # a newer memory replaced it
    SOURCE_REMOVED = "source_removed"  # its instruction file (or the passage in it) is gone
    ARCHIVED = "archived"  # a person archived it


class Source(enum.StrEnum):
    TASK = "task"  # observed in a task: a command it ran, a failure and its fix (task_id, event_id)
    REVIEW = "review"  # a person's review of a task: a rejection reason, a follow-up (task_id)
    FILE = "file"  # an instruction file in the repository (path, content_hash)
    COMMIT = "commit"  # a commit (commit)
    PERSON = "person"  # typed in by a person
    MODEL = "model"  # distilled by a model from a task's trajectory (task_id)


_REQUIRED: dict[Source, tuple[str, ...]] = {
    Source.TASK: ("task_id",),
    Source.REVIEW: ("task_id",),
    Source.FILE: ("path", "content_hash"),
    Source.COMMIT: ("commit",),
    Source.PERSON: (),
    Source.MODEL: ("task_id",),
}


@dataclass(frozen=True)
class Provenance:
    """Where a memory came from. Build one with the class methods; each checks what its source needs."""

    source: Source
    task_id: str | None = None
    event_id: int | None = None
    path: str | None = None
    content_hash: str | None = None
    commit: str | None = None
    detail: str | None = None  # the review verdict, the model's name, a person's note

    def __post_init__(self) -> None:
        object.__setattr__(self, "source", Source(self.source))
        missing = [name for name in _REQUIRED[self.source] if not getattr(self, name)]
        if missing:
            raise InvalidMemory(f"a {self.source} provenance needs {', '.join(missing)}", code="invalid_provenance")

    @classmethod
    def task(cls, task_id: str, event_id: int | None = None, detail: str | None = None) -> Provenance:
        return cls(Source.TASK, task_id=task_id, event_id=event_id, detail=detail)

    @classmethod
    def review(cls, task_id: str, verdict: str) -> Provenance:
        return cls(Source.REVIEW, task_id=task_id, detail=verdict)

    @classmethod
    def file(cls, path: str, content_hash: str) -> Provenance:
        return cls(Source.FILE, path=path, content_hash=content_hash)

    @classmethod
    def at_commit(cls, commit: str) -> Provenance:
        return cls(Source.COMMIT, commit=commit)

    @classmethod
    def person(cls, detail: str | None = None) -> Provenance:
        return cls(Source.PERSON, detail=detail)

    @classmethod
    def model(cls, task_id: str, model: str, event_id: int | None = None) -> Provenance:
        return cls(Source.MODEL, task_id=task_id, event_id=event_id, detail=model)

    def describe(self) -> str:
        """One line for people and for the agent's context: ``task t-1a2b event 7``, ``AGENTS.md @ 3f2a…``."""
        if self.source is Source.FILE:
            return f"{self.path} @ {str(self.content_hash).removeprefix('sha256:')[:12]}"
        if self.source is Source.COMMIT:
            return f"commit {str(self.commit)[:12]}"
        if self.source is Source.PERSON:
            return "added by a person" + (f" ({self.detail})" if self.detail else "")
        where = f"task {self.task_id}" + (f" event {self.event_id}" if self.event_id is not None else "")
        if self.source is Source.REVIEW:
            return f"review of {where}" + (f" ({self.detail})" if self.detail else "")
        if self.source is Source.MODEL:
            return f"distilled by {self.detail or 'a model'} from {where}"
        return where + (f" ({self.detail})" if self.detail else "")


@dataclass(frozen=True)
class Memory:
    """A snapshot of one stored memory."""

    id: int
    project: str
    kind: Kind
    text: str
    status: Status
    provenance: Provenance
    confidence: float
    created_at: float
    updated_at: float
    last_used_at: float | None
    use_count: int
    evidence: int  # how many observations were merged into it (1 when it was stored once)
    supersedes: int | None
    superseded_by: int | None
    archived_reason: ArchiveReason | None
    citations: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """A plain dict (for ``--json`` output and the HTTP API)."""
        provenance = {key: value for key, value in vars(self.provenance).items() if value is not None}
        return {
            "id": self.id, "project": self.project, "kind": self.kind.value, "text": self.text,
            "status": self.status.value, "provenance": {**provenance, "source": self.provenance.source.value},
            "source": self.provenance.describe(), "confidence": self.confidence, "created_at": self.created_at,
            "updated_at": self.updated_at, "last_used_at": self.last_used_at, "use_count": self.use_count,
            "evidence": self.evidence, "supersedes": self.supersedes, "superseded_by": self.superseded_by,
            "archived_reason": self.archived_reason.value if self.archived_reason else None,
            "citations": list(self.citations),
        }


@dataclass(frozen=True)
class Recalled:
    """A memory retrieved for a query, with why it ranked and whether its citations still hold."""

    memory: Memory
    score: float
    stale: bool = False
    stale_reasons: tuple[str, ...] = ()
    ranks: dict[str, int] = field(default_factory=dict)  # "lexical"/"dense" → 1-based rank in that list

    def render(self) -> str:
        """How the agent sees it: id, kind, text, provenance, and a warning if it is stale."""
        line = f"[memory {self.memory.id}] ({self.memory.kind}) {self.memory.text} — source: " \
               f"{self.memory.provenance.describe()}"
        if self.stale:
            line += f" — STALE: {'; '.join(self.stale_reasons)}; check before relying on it"
        return line


def project_key(repo: str | Path) -> str:
    """The project a repository's memories belong to: its resolved path, or its URL without ``.git``/``/``.

    The engine should scope memories with this, so ``./repo``, ``/abs/repo``
    and ``/abs/repo/`` are one project.
    """
    text = str(repo).strip()
    if re.match(r"^[a-z][a-z0-9+.-]*://", text) or re.match(r"^[\w.-]+@[\w.-]+:", text):
        return text.rstrip("/").removesuffix(".git")
    return str(Path(text).expanduser().resolve())
