"""What the forge writes in a task's log, for the person who reads it: one class per event.

Each event is a value with ``KIND`` (the log's kind), :meth:`to_data` (the log's data)
and, where something reads it back, ``from_data``; nothing else in the forge spells an
event's fields. The log is what a person reads; what the forge decides from is in its own
tables (:class:`~errand.forge.links.LinkStore`), except the CI last read, whose event is the
record (:func:`last_checks`). A kind written before ``from_data`` knew a field reads as
that field's default.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from errand.forge.links import PostedQuestion, Round
from errand.forge.records import CheckState
from errand.tasks.records import Event

__all__ = ["AcceptedOnForge", "Check", "ChecksRead", "CiFixStarted", "FollowupAsked", "ForgeFailed", "IssueTaken",
           "PullOpened", "Pushed", "QuestionPosted", "last_checks", "last_issue", "note"]


class _Log(Protocol):
    def record(self, task_id: str, kind: str, data: dict[str, Any]) -> int: ...


class _Reads(Protocol):
    def last_event(self, task_id: str, kinds: Sequence[str]) -> Event | None: ...


class _Note(Protocol):
    KIND: ClassVar[str]

    def to_data(self) -> dict[str, Any]: ...


def note(log: _Log, task_id: str, event: _Note) -> int:
    """Write ``event`` in ``task_id``'s log (about the task, not one of its runs)."""
    return log.record(task_id, event.KIND, event.to_data())


@dataclass(frozen=True)
class IssueTaken:
    """The task resolves this issue (``owner/name#N``), asked for by ``requested_by``."""

    KIND: ClassVar[str] = "forge_issue"
    issue: str
    url: str
    requested_by: str | None = None

    def to_data(self) -> dict[str, Any]:
        return {"issue": self.issue, "url": self.url, "requested_by": self.requested_by}

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> IssueTaken:
        return cls(str(data.get("issue") or ""), str(data.get("url") or ""), _text(data.get("requested_by")))


@dataclass(frozen=True)
class FollowupAsked:
    """The forge started this round on a pull request (:class:`~errand.forge.links.Round` says how)."""

    KIND: ClassVar[str] = "forge_followup"
    round: Round

    def to_data(self) -> dict[str, Any]:
        asked = self.round
        return {"pull": asked.pull, "branch": asked.branch, "head": asked.head, "requested_by": asked.requested_by,
                "threads": list(asked.threads), "ci": asked.ci, "fork": asked.fork, "push_repo": asked.push_repo,
                "fork_pull": asked.fork_pull}


@dataclass(frozen=True)
class Pushed:
    KIND: ClassVar[str] = "forge_pushed"
    branch: str
    commit: str

    def to_data(self) -> dict[str, Any]:
        return {"branch": self.branch, "commit": self.commit}


@dataclass(frozen=True)
class PullOpened:
    KIND: ClassVar[str] = "pull_opened"
    number: int
    url: str
    branch: str

    def to_data(self) -> dict[str, Any]:
        return {"number": self.number, "url": self.url, "branch": self.branch}


@dataclass(frozen=True)
class Check:
    name: str
    state: str
    url: str | None


@dataclass(frozen=True)
class ChecksRead:
    """The CI results on ``commit``, written when they changed: the evidence the forge's CI adds."""

    KIND: ClassVar[str] = "forge_checks"
    commit: str | None
    checks: tuple[Check, ...]

    @classmethod
    def of(cls, commit: str | None, found: Sequence[CheckState]) -> ChecksRead:
        return cls(commit, tuple(Check(c.name, c.state, c.url) for c in found))

    def to_data(self) -> dict[str, Any]:
        return {"commit": self.commit, "checks": [{"name": c.name, "state": c.state, "url": c.url}
                                                 for c in self.checks]}

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> ChecksRead:
        checks = [c for c in data.get("checks") or [] if isinstance(c, dict)]
        return cls(_text(data.get("commit")), tuple(Check(str(c.get("name")), str(c.get("state")),
                                                          _text(c.get("url"))) for c in checks))


@dataclass(frozen=True)
class CiFixStarted:
    """The CI of ``commit`` failed and task ``task_id`` is the round that fixes it."""

    KIND: ClassVar[str] = "forge_ci_fix"
    task_id: str
    commit: str

    def to_data(self) -> dict[str, Any]:
        return {"task_id": self.task_id, "commit": self.commit}


@dataclass(frozen=True)
class QuestionPosted:
    KIND: ClassVar[str] = "forge_question_posted"
    posted: PostedQuestion

    def to_data(self) -> dict[str, Any]:
        return {"question": self.posted.question, "on": self.posted.number, "comment": self.posted.comment_id}


@dataclass(frozen=True)
class ForgeFailed:
    """A pass of the publisher failed for this task; the next pass tries again."""

    KIND: ClassVar[str] = "forge_error"
    code: str
    message: str

    def to_data(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message}


@dataclass(frozen=True)
class AcceptedOnForge:
    """A person accepted the task with ``@errand accept`` on the forge."""

    KIND: ClassVar[str] = "forge_accepted"
    by: str | None
    comment_id: int | None

    def to_data(self) -> dict[str, Any]:
        return {"by": self.by, "comment_id": self.comment_id}


def last_checks(reads: _Reads, task_id: str) -> ChecksRead | None:
    """The CI results last read for ``task_id``, if any were."""
    event = reads.last_event(task_id, [ChecksRead.KIND])
    return ChecksRead.from_data(event.data) if event is not None and isinstance(event.data, dict) else None


def last_issue(reads: _Reads, task_id: str) -> IssueTaken | None:
    event = reads.last_event(task_id, [IssueTaken.KIND])
    return IssueTaken.from_data(event.data) if event is not None and isinstance(event.data, dict) else None


def _text(value: object) -> str | None:
    return str(value) if value is not None else None
