"""``errand memory export`` as a task a person reviews: the approved memories written into
AGENTS.md (or a file named) by the host, with no model, and reviewed like any task's diff.

    task = export_task(store, memories, repo)          # None when the file holds them already

The section is written over a fresh checkout of the base commit (never the user's
worktree, which may hold changes of its own), the diff is taken from that tree as a
task's is, and the task is recorded with its one run already finished and ready for
review (:meth:`~errand.tasks.store.tasks.TaskStore.create_reviewable`), so no worker claims
it. Accepting commits it on the task's branch; rejecting leaves the file as it was.
The run's ``memories_exported`` event and its evidence say which memories went in.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path, PurePosixPath
from typing import Any

from errand import _settings
from errand.agent import Spent
from errand.errors import ConfigError
from errand.memory import MemoryStore, project_key
from errand.memory.export import export_section, exported_memories
from errand.repo import WorkingCopy
from errand.repo.workcopy import is_url, resolve_base, source_name
from errand.tasks.evidence import Confidence, Evidence
from errand.tasks.records import Task
from errand.tasks.store.tasks import TaskStore

__all__ = ["WORKER", "export_task"]

#: Who ran an export's run, as the task's log names it.
WORKER = "host:memory-export"


def export_task(store: TaskStore, memories: MemoryStore, repo: str | Path, *, file: str = "AGENTS.md",
                base: str = "HEAD") -> Task | None:
    """A task, ready for review, whose diff writes the project's approved memories into ``file``
    at ``base``; None when the file at ``base`` holds every one of them already."""
    source = source_name(repo)
    if is_url(source):
        raise ConfigError(f"export into a local clone of {source} (--repo PATH)", code="needs_local_repo")
    commit = resolve_base(source, base)
    project = project_key(source)
    exported = exported_memories(memories, project)
    with tempfile.TemporaryDirectory(prefix="export-", dir=_work_root()) as scratch:
        copy = WorkingCopy.prepare(source, commit, dest=Path(scratch) / "repo")
        try:
            target = copy.path / file
            if target.is_symlink():
                raise ConfigError(f"{file} is a symbolic link at {commit[:12]}; export into a regular file "
                                  "(--file)", code="invalid_path")
            new, diff_text = export_section(memories, project, copy.path, file, chosen=exported)
            if not diff_text:
                return None
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(new, encoding="utf-8")
            diff = copy.diff()
        finally:
            copy.remove()
    kinds = Counter(memory.kind.value for memory in exported)
    summary = (f"Wrote the {len(exported)} approved memories of this project into errand's section of {file} "
               f"({', '.join(f'{count} {kind}' for kind, count in sorted(kinds.items()))}); nothing outside "
               f"the section changed. Written by errand memory export, without a model.")
    files = [{"path": f.path, "status": f.status, "additions": f.additions, "deletions": f.deletions}
             for f in diff.files]
    evidence = Evidence(
        exit_status="finished", exit_detail="written by the host (errand memory export)", tests_before=None,
        tests_after=None, lint_after=None, files=files, test_files=[], additions=diff.stats.additions,
        deletions=diff.stats.deletions, commands_run=0, failed_commands=[], assumptions=[], summary=summary,
        confidence=Confidence("high", [f"the host wrote the approved memories into {file}, without a model",
                                       f"only {file} changes, between errand's markers"]))
    result: dict[str, Any] = {
        "status": "finished", "detail": evidence.exit_detail, "summary": summary, "assumptions": [], "budget": None,
        "rank": 1, "patch": diff.text, "evidence": evidence.to_json(), "spent": Spent().to_json(), "caches": {}}
    name = PurePosixPath(file).as_posix()
    return store.create_reviewable(
        title=f"Export project memory into {name}", repo=source, base_ref=base, base_commit=commit,
        instruction=f"errand memory export: write the approved memories into errand's section of {name}.",
        worker=WORKER, result=result,
        events=[("memories_exported", {"file": name, "ids": [memory.id for memory in exported],
                                       "kinds": dict(kinds)})])


def _work_root() -> Path:
    root = _settings.home() / "work"
    root.mkdir(parents=True, exist_ok=True)
    return root
