"""A sandbox against the way to the model gateway: real bubblewrap sandboxes, the real relay and
gateway in this process, a loopback wire server as the provider.

The relay (127.0.0.1:3129 inside a sandbox) lives in the process that made the
sandbox, beside the egress proxy and the gateway that serve every other sandbox
of that worker. What one sandbox does to it must not reach the others: flooding
it with connections, holding them open half-sent, or looking for the key the
process across the relay holds.
"""

from __future__ import annotations

import json
import os

import pytest

from errand import AsyncSandbox, Network
from errand.gateway import Gateway, Grant, Upstream
from errand.sandbox import GATEWAY_URL
from gateway.conftest import REAL_KEY as KEY
from models.provider_wire import Turn, anthropic_message, anthropic_usage
from models.wire import WireServer
from security.test_egress_heads import HOLD

pytestmark = [pytest.mark.skipif(os.geteuid() != 0, reason="sandboxes need root"), pytest.mark.security,
              pytest.mark.faults, pytest.mark.slow]

REQUEST = {"model": "claude-sonnet-4-5", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]}
FLOOD = 2000  # connections one sandbox opens to its relay
LIMIT = 512  # what the relay lets one sandbox hold at once


async def _sandbox(gateway: Gateway) -> AsyncSandbox:
    host, port = gateway.address
    return await AsyncSandbox.create(gateway=f"{host}:{port}", network=Network.none(), timeout=300)


def _descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


async def _call(sandbox: AsyncSandbox, grant: Grant) -> dict[str, object]:
    result = await sandbox.run("curl", "-sS", "--max-time", "60", "-H", f"x-api-key: {grant.token}",
                               "-H", "content-type: application/json", "-d", json.dumps(REQUEST),
                               f"{grant.url_at(GATEWAY_URL)}/v1/messages")
    assert result.exit_code == 0, result.stderr
    answer: dict[str, object] = json.loads(result.stdout)
    return answer


async def test_one_sandbox_flooding_its_relay_takes_no_more_than_its_share(gateway: Gateway,
                                                                          wire: WireServer) -> None:
    """Each relayed connection costs this process descriptors (the sandbox's side and the gateway's);
    one sandbox opening thousands would take the descriptors the worker's other sandboxes, their
    egress and the gateway need. The relay holds at most its limit per sandbox."""
    attacker_grant = await gateway.grant("attacker", Upstream("anthropic", wire.url, KEY))
    victim_grant = await gateway.grant("victim", Upstream("anthropic", wire.url, KEY))
    before = _descriptors()
    attacker = await _sandbox(gateway)
    victim = await _sandbox(gateway)
    try:
        await attacker.files.write("/tmp/hold.py", HOLD)
        holding = await attacker.exec("/usr/bin/python3", "/tmp/hold.py", str(FLOOD), "3129",
                                      "POST /v1/messages HTTP/1.1\r\nx-api-key: ")
        said = str(await anext(aiter(holding.stdout)))
        assert said.startswith("holding"), said
        # Every connect has returned, so all but the listen backlog have been accepted by the relay.
        taken = _descriptors() - before
        wire.answer(anthropic_message(Turn("still served"), anthropic_usage(3, 2)))
        answer = await _call(victim, victim_grant)
        assert answer["content"] == [{"type": "text", "text": "still served"}]
        assert taken < 3 * LIMIT + 200, f"one sandbox's connections took {taken} descriptors of this process"
    finally:
        await attacker.terminate()
        await victim.terminate()
    assert attacker_grant.requests == 0  # not one of its half-sent requests reached a grant
