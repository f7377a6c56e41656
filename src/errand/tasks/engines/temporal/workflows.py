"""What the Temporal service says of a task's workflow, for the reconciler
(:class:`errand.tasks.engines.reconcile.Workflows`)."""

from __future__ import annotations

from datetime import timedelta

from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from errand.tasks.engines.reconcile import WorkflowState
from errand.tasks.engines.temporal import TemporalSettings

__all__ = ["TemporalWorkflows"]

_STATES = {
    WorkflowExecutionStatus.RUNNING: WorkflowState.RUNNING,
    WorkflowExecutionStatus.CONTINUED_AS_NEW: WorkflowState.RUNNING,
    WorkflowExecutionStatus.COMPLETED: WorkflowState.COMPLETED,
}
#: How long one question to the service may take: a service that is away is "cannot say", not a hang.
RPC_TIMEOUT = timedelta(seconds=10)


class TemporalWorkflows:
    """Asks the service at ``settings`` (connecting when first asked, and again after a failure)."""

    def __init__(self, settings: TemporalSettings, client: Client | None = None) -> None:
        self.settings = settings
        self._client = client

    async def state(self, task_id: str) -> WorkflowState:
        client = await self._connected()
        handle = client.get_workflow_handle(self.settings.workflow_id(task_id))
        try:
            described = await handle.describe(rpc_timeout=RPC_TIMEOUT)
        except RPCError as error:
            if error.status is RPCStatusCode.NOT_FOUND:
                return WorkflowState.MISSING
            raise
        # Failed, timed out, terminated or cancelled: no round of it goes on.
        return _STATES.get(described.status, WorkflowState.FAILED) if described.status else WorkflowState.FAILED

    async def _connected(self) -> Client:
        if self._client is None:
            self._client = await Client.connect(self.settings.address, namespace=self.settings.namespace)
        return self._client
