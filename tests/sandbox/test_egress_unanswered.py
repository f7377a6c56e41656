"""A host the policy lets out to that did not answer is told apart from one that answered badly.

An allowed host down (refused, unreachable, timed out) is answered 503, which clients retry as they
retry an outage met directly, and counted as unanswered for the setup failure's note. A host that
answered, but whose TLS the proxy could not verify, is no outage: it stays 502 (retrying it only
delays the failure) and is not said to be down. The proxy runs in this process on loopback; the
declared host (whose TLS the proxy re-originates) is a loopback TLS server under a certificate no
trust store knows. Nothing leaves the machine.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from pathlib import Path

import pytest

from errand.sandbox import Network
from errand.sandbox._egress.intercept import Interceptor
from errand.sandbox._egress.ledger import UNANSWERED
from errand.sandbox._egress.proxy import EgressProxy
from errand.sandbox.secret import Secret
from proxied import asked

HOST = "declared.test"
SANDBOX = "sb-unanswered"


async def _through_the_tunnel(proxy_port: int, port: int, interceptor: Interceptor) -> bytes:
    """A GET to HOST:port through the proxy's TLS interception, as a sandbox's client makes it;
    what the proxy answered inside the tunnel."""
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy_port)
    try:
        writer.write(f"CONNECT {HOST}:{port} HTTP/1.1\r\nHost: {HOST}:{port}\r\n\r\n".encode())
        await writer.drain()
        assert (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)).startswith(b"HTTP/1.1 200")
        trusting = ssl.create_default_context(cadata=interceptor.ca_pem.decode())
        await writer.start_tls(trusting, server_hostname=HOST)
        writer.write(f"GET / HTTP/1.1\r\nHost: {HOST}:{port}\r\n\r\n".encode())
        await writer.drain()
        return await asyncio.wait_for(reader.read(), 60)
    finally:
        writer.close()


@pytest.mark.faults
async def test_a_declared_host_whose_tls_fails_verification_is_a_bad_gateway_not_a_host_away(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The origin: TLS under a leaf of another interceptor's CA, which the proxy's trust store lacks.
    stranger = Interceptor((Secret("OTHER", "x", hosts=[HOST]),))
    origin = await asyncio.start_server(lambda _r, w: w.close(), "127.0.0.1", 0,
                                        ssl=stranger.server_context(HOST, lambda _name: True))
    port = origin.sockets[0].getsockname()[1]
    monkeypatch.setenv("ERRAND_EGRESS_HOSTS", f"{HOST}=127.0.0.1")
    interceptor = Interceptor((Secret("API_TOKEN", "real-value", hosts=[f"{HOST}:{port}"]),))
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    proxy = EgressProxy()
    await proxy.serve(SANDBOX, listener, Network.allow(f"{HOST}:{port}", cidrs=[f"127.0.0.1/32:{port}"]),
                      tmp_path / "egress.log", interceptor)
    ledger = proxy._ledgers[SANDBOX]
    try:
        answer = await _through_the_tunnel(listener.getsockname()[1], port, interceptor)
        for _ in range(500):  # the refusal is recorded as the connection ends
            if ledger.refusals:
                break
            await asyncio.sleep(0.01)
    finally:
        await proxy.stop(SANDBOX)
        origin.close()
    assert answer.startswith(b"HTTP/1.1 502"), answer
    assert b"certificate verify failed" in answer.lower(), answer
    assert ledger.refusals == 1 and ledger.unanswered() == []
    assert not any(reason.startswith(UNANSWERED) for tally in ledger.hosts.values() for reason in tally.refused)


@pytest.mark.faults
async def test_an_allowed_host_with_nothing_listening_is_unavailable_and_said_not_to_answer(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as closed:  # a port nothing listens on once this block ends
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    monkeypatch.setenv("ERRAND_EGRESS_HOSTS", f"{HOST}=127.0.0.1")
    policy = Network.allow(f"{HOST}:{port}", cidrs=[f"127.0.0.1/32:{port}"])
    answer, ledger = await asked(tmp_path / "egress.log", policy,
                                 f"GET http://{HOST}:{port}/simple/ HTTP/1.1\r\nHost: {HOST}:{port}\r\n\r\n".encode())
    assert answer.startswith(b"HTTP/1.1 503 Service Unavailable"), answer
    assert ledger.unanswered() == [(HOST, port)]
