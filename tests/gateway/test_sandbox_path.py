"""A sandbox reaches the gateway, and only the gateway, at 127.0.0.1:3129 inside it.

Real bubblewrap sandboxes: a process inside calls the gateway with curl and gets
the wire server's answer (the wire saw the real key); the same process cannot
reach the wire server, directly or through its egress proxy, and holds no key.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator

import pytest

from errand import AsyncSandbox, ConfigError, Network
from errand.gateway import Gateway, Grant, Upstream
from errand.sandbox import GATEWAY_URL
from gateway.conftest import REAL_KEY
from models.provider_wire import Turn, anthropic_events, anthropic_message, anthropic_usage
from models.wire import WireServer

INSIDE = GATEWAY_URL
REQUEST = {"model": "claude-sonnet-4-5", "max_tokens": 50, "messages": [{"role": "user", "content": "Fix it."}]}


@pytest.fixture
async def grant(gateway: Gateway, wire: WireServer) -> Grant:
    return await gateway.grant("sandboxed-task", Upstream("anthropic", wire.url, REAL_KEY))


@pytest.fixture
async def sandbox(gateway: Gateway) -> AsyncIterator[AsyncSandbox]:
    host, port = gateway.address
    sb = await AsyncSandbox.create(gateway=f"{host}:{port}", network=Network.none(), timeout=120)
    try:
        yield sb
    finally:
        await sb.terminate()


def _curl(grant: Grant, *extra: str) -> list[str]:
    return ["curl", "-sS", "--max-time", "60", "-H", f"x-api-key: {grant.token}", "-H",
            "content-type: application/json", "-H", "anthropic-version: 2023-06-01", *extra]


async def test_a_process_in_the_sandbox_gets_the_wire_servers_answer_through_the_gateway(
        sandbox: AsyncSandbox, gateway: Gateway, grant: Grant, wire: WireServer) -> None:
    wire.answer(anthropic_message(Turn("Fixed from the wire."), anthropic_usage(40, 8)))
    wire.stream(anthropic_events(Turn("Streamed from the wire."), anthropic_usage(50, 9)))
    base = grant.url_at(INSIDE)
    whole = await sandbox.run(*_curl(grant, "-d", json.dumps(REQUEST), f"{base}/v1/messages"))
    assert whole.exit_code == 0, whole.stderr
    assert json.loads(whole.stdout)["content"][0]["text"] == "Fixed from the wire."
    streamed = await sandbox.run(*_curl(grant, "-N", "-d", json.dumps({**REQUEST, "stream": True}),
                                        f"{base}/v1/messages"))
    assert streamed.exit_code == 0, streamed.stderr
    assert "Streamed from the wire." in streamed.stdout and "event: message_stop" in streamed.stdout

    assert [request.headers["x-api-key"] for request in wire.requests] == [REAL_KEY, REAL_KEY]
    await gateway.settle(grant)
    assert [call.usage.input_tokens for call in grant.calls if call.usage] == [40, 50]
    assert all(call.complete for call in grant.calls)


@pytest.mark.security
async def test_the_sandbox_cannot_reach_the_wire_server_itself_nor_see_the_key(
        sandbox: AsyncSandbox, grant: Grant, wire: WireServer) -> None:
    direct = await sandbox.run("curl", "-sS", "--max-time", "20", "--noproxy", "*", "-d", "{}",
                               f"{wire.url}/v1/messages")
    assert direct.exit_code != 0  # its own loopback: nothing listens there
    # NO_PROXY names 127.0.0.1 in a sandbox: --noproxy "" makes curl ask the proxy even so.
    proxied = await sandbox.run("curl", "-sS", "--max-time", "20", "--noproxy", "", "--proxy", "http://127.0.0.1:3128",
                                "-o", "/dev/null", "-w", "%{http_code}", "-d", "{}", f"{wire.url}/v1/messages")
    assert proxied.stdout.strip() == "403", proxied.stderr  # the egress proxy refuses the host's loopback
    tunnel = await sandbox.run("curl", "-sS", "--max-time", "20", "--noproxy", "", "--proxytunnel", "--proxy",
                               "http://127.0.0.1:3128", "-d", "{}", f"{wire.url}/v1/messages")
    assert tunnel.exit_code != 0
    assert wire.requests == []
    # What a process inside can read: its environment, every process's, the files a CLI would look in.
    seen = await sandbox.run("sh", "-c", "env; cat /proc/*/environ /proc/*/cmdline 2>/dev/null; ps -ef 2>/dev/null;"
                             " cat ~/.claude* ~/.codex/* 2>/dev/null; true")
    assert REAL_KEY not in seen.stdout + seen.stderr


@pytest.mark.security
async def test_the_worker_holding_the_key_is_out_of_the_sandboxs_sight(gateway: Gateway, grant: Grant,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker keeps the key in its environment (where the gateway's grants read it): a sandbox it
    creates then inherits none of it, sees none of the worker's processes, and finds the key in no
    file, environment, command line or memory map it can read."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", REAL_KEY)
    host, port = gateway.address
    sb = await AsyncSandbox.create(gateway=f"{host}:{port}", network=Network.none(), timeout=120)
    try:
        backwards = REAL_KEY[::-1]  # the search names the key only turned round, so it does not find itself
        seen = await sb.run("sh", "-c", "env; for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; "
                            "cat $p/environ $p/maps 2>/dev/null | tr '\\0' '\\n'; done; ps -ef 2>/dev/null; "
                            f"python3 -c \"print('{backwards}'[::-1])\" > /tmp/probe; grep -rIl -F -f /tmp/probe "
                            "--exclude-dir=proc --exclude-dir=sys --exclude-dir=dev --exclude-dir=usr / 2>/dev/null "
                            "| sed 's/^/KEY-FILE: /'; echo search-done")
    finally:
        await sb.terminate()
    assert "search-done" in seen.stdout and "ANTHROPIC_API_KEY" not in seen.stdout
    assert REAL_KEY not in seen.stdout
    # The search finds what is there (its own probe), and nothing else.
    assert [line for line in seen.stdout.splitlines() if line.startswith("KEY-FILE: ")] == ["KEY-FILE: /tmp/probe"]
    assert "pytest" not in seen.stdout  # no process of the worker's is in its sight


async def test_the_relay_reaches_the_gateway_and_nothing_else(sandbox: AsyncSandbox, grant: Grant,
                                                             wire: WireServer) -> None:
    """A foreign route through the relay is the gateway's refusal, not a way to the upstream."""
    answer = await sandbox.run(*_curl(grant, "-d", "{}", f"{INSIDE}/v1/chat/completions"))
    assert json.loads(answer.stdout)["error"]["type"] == "not_found_error"
    unknown = await sandbox.run("curl", "-sS", "-H", "x-api-key: " + REAL_KEY[:-1], "-d", "{}",
                                f"{INSIDE}/v1/messages")
    assert json.loads(unknown.stdout)["error"]["type"] == "authentication_error"
    assert wire.requests == []


async def test_a_sandbox_without_a_gateway_has_nothing_at_its_address(gateway: Gateway) -> None:
    sb = await AsyncSandbox.create(network=Network.none(), timeout=120)
    try:
        result = await sb.run("curl", "-sS", "--max-time", "20", f"{INSIDE}/v1/models")
        assert result.exit_code == 7, result.stderr  # connection refused
    finally:
        await sb.terminate()


@pytest.mark.parametrize("address", ["10.0.0.1:8080", "api.example.org:443", "127.0.0.1", "relative/sock", ""])
async def test_a_gateway_address_off_the_host_is_refused_before_anything_starts(address: str) -> None:
    with pytest.raises(ConfigError) as refused:
        await AsyncSandbox.create(gateway=address)
    assert refused.value.code == "invalid_gateway"


CREATE_DETACHED = """
import sys
from errand import Network, Sandbox
print(Sandbox.create(gateway=sys.argv[1], network=Network.none(), detach=True, timeout=120).id)
"""


async def test_a_detached_sandbox_keeps_its_way_to_the_gateway_after_its_creator_exits(
        gateway: Gateway, grant: Grant, wire: WireServer) -> None:
    host, port = gateway.address
    created = await asyncio.to_thread(subprocess.run, [sys.executable, "-c", CREATE_DETACHED, f"{host}:{port}"],
                                      capture_output=True, text=True, check=True, timeout=120)
    sb = await AsyncSandbox.from_id(created.stdout.strip())  # its creator has exited: a supervisor relays
    try:
        wire.answer(anthropic_message(Turn("Fixed, detached."), anthropic_usage(5, 2)))
        result = await sb.run(*_curl(grant, "-d", json.dumps(REQUEST), f"{grant.url_at(INSIDE)}/v1/messages"))
        assert result.exit_code == 0, result.stderr
        assert json.loads(result.stdout)["content"][0]["text"] == "Fixed, detached."
    finally:
        await sb.terminate()
    assert [request.headers["x-api-key"] for request in wire.requests] == [REAL_KEY]




@pytest.mark.slow
@pytest.mark.needs("runsc")
async def test_a_gvisor_sandbox_reaches_the_gateway_the_same_way(gateway: Gateway, grant: Grant,
                                                                 wire: WireServer) -> None:
    host, port = gateway.address
    sb = await AsyncSandbox.create(gateway=f"{host}:{port}", network=Network.none(), isolation="gvisor",
                                   timeout=180)
    try:
        wire.answer(anthropic_message(Turn("Fixed under gVisor."), anthropic_usage(12, 3)))
        result = await sb.run(*_curl(grant, "-d", json.dumps(REQUEST), f"{grant.url_at(INSIDE)}/v1/messages"))
        assert result.exit_code == 0, result.stderr
        assert json.loads(result.stdout)["content"][0]["text"] == "Fixed under gVisor."
        direct = await sb.run("curl", "-sS", "--max-time", "20", "--noproxy", "*", f"{wire.url}/")
        assert direct.exit_code != 0
    finally:
        await sb.terminate()
    assert [request.headers["x-api-key"] for request in wire.requests] == [REAL_KEY]
