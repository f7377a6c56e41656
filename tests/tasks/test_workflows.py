"""What the Temporal service says of a task's workflow, as the reconciler asks it: running, none,
or ended without its round going on; a service that cannot be reached is no answer."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest
from temporalio.client import Client

from errand.tasks.engines.reconcile import WorkflowState
from errand.tasks.engines.temporal import TemporalSettings
from errand.tasks.engines.temporal.workflows import TemporalWorkflows


async def test_a_task_s_workflow_is_running_missing_or_failed_once_ended_without_completing(
        temporal_server: Any, temporal_queue: str) -> None:
    settings = TemporalSettings(temporal_server.address, prefix=temporal_queue)
    workflows = TemporalWorkflows(settings)
    assert await workflows.state("t-never") is WorkflowState.MISSING
    client = await Client.connect(settings.address, namespace=settings.namespace)
    # A workflow no worker takes up stays running: what the service says of a round under way.
    handle = await client.start_workflow("errand-test-nothing", id=settings.workflow_id("t-1"),
                                         task_queue=f"{temporal_queue}-unserved")
    assert await workflows.state("t-1") is WorkflowState.RUNNING
    assert await workflows.state("t-2") is WorkflowState.MISSING  # another task's, by its own id
    await handle.terminate(reason="a person terminated it")
    assert await workflows.state("t-1") is WorkflowState.FAILED


async def test_a_service_that_cannot_be_reached_is_an_error_not_an_answer() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    workflows = TemporalWorkflows(TemporalSettings(f"127.0.0.1:{port}"))
    with pytest.raises(RuntimeError):
        await asyncio.wait_for(workflows.state("t-1"), 120)
