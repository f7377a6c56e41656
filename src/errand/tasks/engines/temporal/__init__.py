"""The Temporal engine: a task is a workflow, an attempt a heartbeating activity on the worker
that holds its working copy.

Three parts: :mod:`.dispatch` runs in ``errand serve --engine temporal`` (it claims
queued tasks from the store, starts their workflows and turns what people send into
signals), and beside it :mod:`.conductor` runs the workflows; :mod:`.worker` is
``errand worker --engine temporal`` (it runs the rounds' activities); :mod:`.workflow`
is the workflow itself, which only orders activities and waits. The task steps are
:mod:`errand.tasks.round.order`'s; the store is the one every engine uses.

Task queues (``<prefix>`` is ``errand`` unless ``ERRAND_TEMPORAL_QUEUE`` says): ``<prefix>-begin``
takes a new round (a worker polls it only while it has room for one), ``<prefix>-tasks``
runs workflows and store-only activities (polled by ``errand serve`` alone: a round worker
that stalls holds no workflow's step), and each worker has its own,
``<prefix>-worker-<host>-<home digest>``, for the activities that need its disk: preparing,
attempting, concluding and closing the rounds it began.
"""

from __future__ import annotations

import hashlib
import os
import socket
from dataclasses import dataclass

from errand import _settings
from errand.database import DEFAULT_STORE_RETRY, store_retry_from_environment
from errand.errors import ConfigError

__all__ = ["WORKFLOW", "TemporalSettings"]

WORKFLOW = "errand-task"


@dataclass(frozen=True)
class TemporalSettings:
    """Where the Temporal service is (``--temporal`` or ``ERRAND_TEMPORAL``), its namespace
    (``ERRAND_TEMPORAL_NAMESPACE``), the prefix of errand's task queues (``ERRAND_TEMPORAL_QUEUE``:
    two errand installations may share a service), and how long a worker may stay silent before
    its attempts are taken for lost (``ERRAND_WORKER_LEASE``, as the local engine's lease), and how
    long the engine's store access retries while the database is away (``ERRAND_STORE_RETRY_SECONDS``)."""

    address: str
    namespace: str = "default"
    heartbeat: float = 30.0
    prefix: str = "errand"
    store_retry: float = DEFAULT_STORE_RETRY

    @classmethod
    def from_environment(cls, address: str | None = None) -> TemporalSettings:
        from errand.tasks.engines.local import lease_from_environment

        address = address or os.environ.get("ERRAND_TEMPORAL") or ""
        if not address.strip():
            raise ConfigError("the Temporal engine needs the Temporal service's address: --temporal HOST:PORT or "
                              "ERRAND_TEMPORAL", code="temporal_address_missing")
        return cls(address.strip(), os.environ.get("ERRAND_TEMPORAL_NAMESPACE") or "default",
                   lease_from_environment(), os.environ.get("ERRAND_TEMPORAL_QUEUE") or "errand",
                   store_retry_from_environment())

    @property
    def begin_queue(self) -> str:
        return f"{self.prefix}-begin"

    @property
    def tasks_queue(self) -> str:
        return f"{self.prefix}-tasks"

    def worker_queue(self) -> str:
        """This errand home's own task queue: the same after a restart, so a worker that comes
        back takes up the rounds whose working copies it holds (an answer given meanwhile)."""
        host = socket.gethostname()
        return f"{self.prefix}-worker-{host}-{hashlib.sha256(_settings.home_identity().encode()).hexdigest()[:10]}"

    def workflow_id(self, task_id: str) -> str:
        return f"{self.prefix}-task-{task_id}"
