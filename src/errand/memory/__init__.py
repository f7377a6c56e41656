"""errand.memory: project memory that fills itself from evidence, shows its sources, and retrieves well.

How the task engine uses it (every call is synchronous; one store per process)::

    from errand.memory import (MemoryStore, project_key, sync_instructions, retrieve,
                               observe_command, observe_fix, observe_review, observe_followup, distill)

    store = MemoryStore.open(url)                # the task store's database URL; migrates it
    project = project_key(task.repo)             # scope: resolved path or normalized URL

    # When a task starts (host side, on the user's checkout, never the sandbox's copy):
    sync_instructions(store, project, repo_dir)  # AGENTS.md & kin → active 'instruction' memories
    withheld = withheld_ids(store, project, files_in_prompt)      # errand.memory.selection: not given twice
    recalled = select(store, project, task.instruction, k=8, exclude=withheld.ids, repo_dir=repo_dir)
    scope = FileScope.load(store, project, exclude=withheld.never_scoped)   # scope.matching(path) as files open
    context = "\\n".join(item.render() for item in recalled)       # ids, text, provenance, STALE flags
    store.record_use(task.id, [item.memory.id for item in recalled], "given")

    # The agent's tools:
    #   recall(query)  → retrieve(store, project, query, k=5, repo_dir=repo_dir); record_use(..., "recalled")
    #   remember(text) → store.add(project, text, kind="fact", status="proposed", confidence=0.5,
    #                              provenance=Provenance.task(task.id, event_id, "remember tool"))
    #   (catch SecretRefused / InvalidMemory and hand error.message back to the agent)

    # As things happen:
    observe_command(store, project, "pytest -q", 0, kind="test", task_id=task.id, event_id=event_id)
    observe_fix(store, project, command=..., error=..., fix=..., task_id=task.id, event_id=event_id)
    observe_review(store, project, task.id, "rejected", reason)    # after TaskStore.add_review
    observe_followup(store, project, task.id, instruction)

    # When a task finishes, with a model configured (async):
    await distill(store, project, task.id, trajectory_messages, model)   # → proposed memories

    # The task page: store.uses(task.id) → [(Memory, "given" | "recalled" | "used"), ...]

People see and change memories with ``errand memory ls|show|add|edit|rm|approve|reject``
(:data:`errand.cli.memory.memory_app`). Errors are :class:`MemoryStoreError` and its children.

The names above are imported when first asked for (errand._lazy): ``errand.memory.records``
does not load the store, its embedder or distillation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from errand._lazy import face

if TYPE_CHECKING:
    from errand.memory.distill import DistillResult, distill
    from errand.memory.embedders import E5Embedder, Embedder, default_embedder
    from errand.memory.errors import InvalidMemory, MemoryNotFound, MemoryStoreError, SecretRefused
    from errand.memory.ingest import SyncReport, sync_instructions
    from errand.memory.observe import observe_command, observe_fix, observe_followup, observe_review
    from errand.memory.records import ArchiveReason, Kind, Memory, Provenance, Recalled, Source, Status, project_key
    from errand.memory.retrieve import Weights, retrieve
    from errand.memory.secretscan import check_no_secret
    from errand.memory.store import MemoryStore

_HOMES = {
    "DistillResult": "distill", "distill": "distill", "E5Embedder": "embedders", "Embedder": "embedders",
    "default_embedder": "embedders", "InvalidMemory": "errors", "MemoryNotFound": "errors",
    "MemoryStoreError": "errors", "SecretRefused": "errors", "SyncReport": "ingest", "sync_instructions": "ingest",
    "observe_command": "observe", "observe_fix": "observe", "observe_followup": "observe",
    "observe_review": "observe", "ArchiveReason": "records", "Kind": "records", "Memory": "records",
    "Provenance": "records", "Recalled": "records", "Source": "records", "Status": "records",
    "project_key": "records", "Weights": "retrieve", "retrieve": "retrieve", "check_no_secret": "secretscan",
    "MemoryStore": "store",
}

__all__ = [
    "ArchiveReason",
    "DistillResult",
    "E5Embedder",
    "Embedder",
    "InvalidMemory",
    "Kind",
    "Memory",
    "MemoryNotFound",
    "MemoryStore",
    "MemoryStoreError",
    "Provenance",
    "Recalled",
    "SecretRefused",
    "Source",
    "Status",
    "SyncReport",
    "Weights",
    "check_no_secret",
    "default_embedder",
    "distill",
    "observe_command",
    "observe_fix",
    "observe_followup",
    "observe_review",
    "project_key",
    "retrieve",
    "sync_instructions",
]

if not TYPE_CHECKING:  # a type checker sees the names above, and no catch-all
    __getattr__ = face(__name__, _HOMES)
