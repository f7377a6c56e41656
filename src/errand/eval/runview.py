"""A run directory as a person reads it: the runs under a directory, one run's figures and
instances, and each attempt's grade, patch and trajectory (for the HTML report and the web UI).

Everything here is read from files a run wrote; the patches and trajectories in them are
the agent's text, so whoever shows them must escape them. Names in a URL are looked up among
the directory's entries, never joined onto a path, so no name reaches outside the run.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from errand.eval.errors import EvalError
from errand.eval.grading import Grade
from errand.eval.metrics import Attempt, summarize
from errand.eval.runs import load_attempts, read_json

__all__ = ["AttemptView", "InstanceView", "RunListing", "RunView", "find_run", "list_runs", "read_run"]

PATCH_FILE = "patch.diff"  # the graded patch of an attempt that no agent made (grade, validate)


@dataclass(frozen=True)
class AttemptView:
    """One graded attempt: its grade, its agent's record (empty for a given patch), where it lives."""

    instance_dir: str
    label: str
    grade: Grade
    agent: Mapping[str, Any]
    path: Path

    @property
    def anchor(self) -> str:
        return f"attempt-{self.instance_dir}-{self.label}"

    @property
    def href(self) -> str:
        """The attempt's files, relative to the run directory."""
        return f"instances/{self.instance_dir}/{self.label}"

    @property
    def has_trajectory(self) -> bool:
        return (self.path / "trajectory.json").is_file()

    def patch(self) -> str:
        if "patch" in self.agent:
            return str(self.agent.get("patch") or "")
        given = self.path / PATCH_FILE
        return given.read_text(errors="replace") if given.is_file() else ""

    def trajectory(self) -> list[dict[str, Any]]:
        """The events of the agent's attempt (``time``, ``kind``, ``data``); none for a given patch."""
        if not self.has_trajectory:
            return []
        events = read_json(self.path / "trajectory.json")
        return [event for event in events if isinstance(event, dict)] if isinstance(events, list) else []


@dataclass(frozen=True)
class InstanceView:
    instance_id: str
    instance_dir: str
    attempts: tuple[AttemptView, ...]

    @property
    def resolved(self) -> int:
        return sum(attempt.grade.resolved for attempt in self.attempts)


@dataclass(frozen=True)
class RunView:
    """One run: what was run (``run.json``), its figures, and its instances."""

    name: str
    path: Path
    meta: Mapping[str, Any]
    summary: Mapping[str, Any]
    instances: tuple[InstanceView, ...]
    saved_summary: Mapping[str, Any] = field(default_factory=dict)  # summary.json as the command wrote it

    @property
    def is_validation(self) -> bool:
        return "gold_resolved" in self.saved_summary

    @property
    def attempts(self) -> list[AttemptView]:
        return [attempt for instance in self.instances for attempt in instance.attempts]

    def attempt(self, instance_dir: str, label: str) -> AttemptView:
        for instance in self.instances:
            if instance.instance_dir == instance_dir:
                for attempt in instance.attempts:
                    if attempt.label == label:
                        return attempt
        raise EvalError(f"run {self.name} has no attempt {label} of {instance_dir}", code="eval_unknown_attempt")


@dataclass(frozen=True)
class RunListing:
    """A run as the list of runs shows it, from its summary.json (nothing recomputed)."""

    name: str
    path: Path
    meta: Mapping[str, Any]
    summary: Mapping[str, Any]
    modified: float

    @property
    def kind(self) -> str:
        return str(self.meta.get("command") or self.name.split("-", 1)[0])

    @property
    def updated(self) -> str:
        return time.strftime("%Y-%m-%d %H:%M", time.localtime(self.modified))


def read_run(path: Path) -> RunView:
    """The run at ``path``, its figures computed again from the graded attempts it holds."""
    attempts = load_attempts(path)
    instances = []
    for instance_id, items in sorted(attempts.items()):
        views = tuple(_attempt_view(attempt) for attempt in items)
        instances.append(InstanceView(instance_id, views[0].instance_dir, views))
    return RunView(path.name, path, _optional(path / "run.json"), summarize(attempts), tuple(instances),
                   _optional(path / "summary.json"))


def _attempt_view(attempt: Attempt) -> AttemptView:
    where: Path = attempt.extra["dir"]
    return AttemptView(where.parent.name, attempt.grade.label, attempt.grade, _optional(where / "agent.json"), where)


def _optional(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    found = read_json(path)
    return found if isinstance(found, dict) else {}


def list_runs(root: Path) -> list[RunListing]:
    """The runs directly under ``root``, the latest first (a missing root holds none)."""
    if not root.is_dir():
        return []
    found = []
    for path in root.iterdir():
        if path.is_dir() and (path / "instances").is_dir():
            summary = path / "summary.json"
            modified = (summary if summary.is_file() else path).stat().st_mtime
            found.append(RunListing(path.name, path, _optional(path / "run.json"), _optional(summary), modified))
    return sorted(found, key=lambda run: (-run.modified, run.name))


def find_run(root: Path, name: str) -> Path:
    """The run called ``name`` under ``root``: looked up among its entries, so no name leaves it."""
    for listing in list_runs(root):
        if listing.name == name:
            return listing.path
    raise EvalError(f"no evaluation run {name!r} under {root}", code="eval_unknown_run")

