"""The HTTP API for sandboxes: the live ones, their egress log, and ending one."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Response

from errand.sandbox import AsyncSandbox, EgressEvent, SandboxInfo
from errand.server.schemas import Text

__all__ = ["router"]

router = APIRouter(prefix="/api/sandboxes", tags=["sandboxes"])
SandboxId = Annotated[Text, Path(max_length=64, description="A sandbox id, `sb-` and ten characters.")]
NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"description": "No live sandbox has that id", "content": {"application/problem+json": {}}}}


@router.get("", response_model=list[SandboxInfo])
async def list_sandboxes() -> list[SandboxInfo]:
    """This errand home's live sandboxes, the tasks' and any others, with their labels
    (a task's sandboxes carry `task` and `run`). Another home's are neither listed nor reachable."""
    return await AsyncSandbox.list()


@router.get("/{sandbox_id}/egress", response_model=list[EgressEvent], responses=NOT_FOUND)
async def sandbox_egress(sandbox_id: SandboxId) -> list[EgressEvent]:
    """Every egress decision of the sandbox so far: host, port, verdict, reason, bytes."""
    sandbox = await AsyncSandbox.from_id(sandbox_id)
    try:
        return await sandbox.egress_log()
    finally:
        await sandbox.close()  # a look, not ownership: the handle must not outlive the request


@router.delete("/{sandbox_id}", status_code=204, responses=NOT_FOUND)
async def terminate_sandbox(sandbox_id: SandboxId) -> Response:
    """End the sandbox: every process killed, everything it left on the host removed."""
    sandbox = await AsyncSandbox.from_id(sandbox_id)
    await sandbox.terminate()
    return Response(status_code=204)
