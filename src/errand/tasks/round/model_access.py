"""An agent CLI's model access, granted per run by the host's model gateway.

The CLI runs in the sandbox, where the model key never goes. For each run of an
agent CLI the round asks :class:`RunGrants` for a grant: the gateway (started in
this worker's process at the first grant, on loopback) gets the task's endpoint
and the key the endpoint's variable names in this worker's environment, and the
run gets a token of its own and the gateway's base URL as the sandbox sees it
(``errand.sandbox.GATEWAY_URL``, a relay to the gateway that the sandbox is
created with). The grant is revoked when the run ends; the gateway stops with
the worker.

A grant made with the run's :class:`~errand.agent.mcp_server.Desk` opens errand's
tools for it too: the worker's :class:`~errand.agent.mcp_server.ToolServer`,
mounted on the gateway (so the same relay reaches it), serves the run's MCP
server under a token of its own, closed with the grant.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Mapping
from pathlib import Path

from errand import _settings
from errand.agent.budgets import Budgets
from errand.agent.external import ModelAccess, ToolAccess
from errand.agent.mcp_server import PATH, Desk, ToolServer
from errand.errors import ConfigError
from errand.gateway import PROTOCOLS, Budget, Gateway, Grant, Upstream
from errand.models import ModelEndpoint, ModelError, Usage
from errand.sandbox import GATEWAY_URL

__all__ = ["RunGrants"]

SETTLE_SECONDS = 30.0


class RunGrants:
    """The worker's model gateway, as rounds use it: :meth:`grant` per run, :meth:`revoke` when it ends."""

    def __init__(self, environ: Mapping[str, str] | None = None, transcripts: Path | None = None) -> None:
        self.environ = os.environ if environ is None else environ
        self.transcripts = transcripts
        self.gateway: Gateway | None = None
        self.tools: ToolServer | None = None
        self.grants: dict[str, Grant] = {}

    async def grant(self, run_id: str, endpoint: ModelEndpoint, budgets: Budgets, protocol: str,
                    desk: Desk | None = None) -> ModelAccess:
        """A token for ``run_id``'s calls to ``endpoint`` on the wire ``protocol`` (the gateway's name for
        it: ``anthropic``, ``openai-responses``), stopped at ``budgets``' tokens and cost; with ``desk``,
        errand's tools for the run on it, under a token of their own."""
        if protocol not in PROTOCOLS:
            raise ConfigError(f"the model gateway speaks no {protocol!r} (it speaks {', '.join(PROTOCOLS)})",
                              code="invalid_config")
        key = self.environ.get(endpoint.api_key_env or "")
        if not key:
            raise ModelError(f"this worker's environment has no ${endpoint.api_key_env}, the key of "
                             f"{endpoint.describe()}; the gateway has no key to give the run's calls",
                             provider=endpoint.provider, code="model_key_missing")
        gateway = await self._started()
        grant = await gateway.grant(run_id, Upstream(protocol, endpoint.base_url or "", key),
                                    Budget(max_tokens=budgets.max_tokens, max_cost=budgets.max_cost),
                                    pricing=endpoint.profile.pricing)
        self.grants[run_id] = grant
        tools = None
        if desk is not None and self.tools is not None:
            tools = ToolAccess(GATEWAY_URL + PATH, await self.tools.open(run_id, desk))
        host, port = gateway.address
        return ModelAccess(grant.url_at(GATEWAY_URL), grant.token, endpoint.model, relay=f"{host}:{port}",
                           tools=tools)

    async def revoke(self, run_id: str) -> tuple[Usage, float] | None:
        grant = self.grants.pop(run_id, None)
        if self.tools is not None:
            await self.tools.close(run_id)
        if grant is None or self.gateway is None:
            return None
        await self.gateway.revoke(grant)
        # What it metered is whole once no call is under way; a call the CLI left hanging upstream is
        # not waited for past a bound (its CLI has been stopped already).
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.gateway.settle(grant), SETTLE_SECONDS)
        return grant.usage, grant.cost

    async def close(self) -> None:
        """Stop the gateway (calls under way end); a later grant starts it again."""
        gateway, self.gateway = self.gateway, None
        tools, self.tools = self.tools, None
        self.grants.clear()
        if tools is not None:
            await tools.stop()
        if gateway is not None:
            await gateway.stop()

    async def _started(self) -> Gateway:
        if self.gateway is None:
            where = self.transcripts or _settings.home() / "transcripts"
            where.mkdir(parents=True, exist_ok=True)
            self.gateway = await Gateway(where).start()
            self.tools = ToolServer()
            self.gateway.mount(PATH, self.tools)
        return self.gateway
