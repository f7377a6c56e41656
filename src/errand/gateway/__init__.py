"""errand.gateway: the model gateway; a sandbox's agent holds a token, the key stays on the host.

An agent CLI that runs inside a sandbox (Claude Code, Codex, Gemini CLI, ...)
talks to a model through the host's gateway::

    async with Gateway(transcripts=Path("/var/lib/errand/transcripts")) as gateway:
        grant = await gateway.grant("task-12.run-1",
                                    Upstream("anthropic", "https://api.anthropic.com", key),
                                    Budget(max_tokens=2_000_000, max_cost=5.0))
        # the sandbox gets grant.token and grant.url_at(errand.sandbox.GATEWAY_URL), never the key
        ...
        await gateway.revoke(grant)
        grant.usage, grant.cost, grant.calls      # metered, streaming included

The gateway swaps the token for the real key, forwards to the grant's upstream
on its protocol's routes only, meters every call from the usage the provider
reports (its prices from errand's table of models, or the grant's own), refuses
calls once the budget is spent with the provider's own error body, and writes
every request and reply to the grant's transcript with the key and the token
redacted. A sandbox reaches it at a fixed loopback address of its own
(``AsyncSandbox.create(gateway=...)``; see errand.sandbox).
"""

from __future__ import annotations

from errand.gateway.errors import GatewayError
from errand.gateway.grants import Budget, Call, Grant, Upstream
from errand.gateway.protocols import PROTOCOLS, Protocol
from errand.gateway.server import Gateway

__all__ = ["PROTOCOLS", "Budget", "Call", "Gateway", "GatewayError", "Grant", "Protocol", "Upstream"]
