"""One request through an egress proxy serving one sandbox on loopback, in the test's own process."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

from errand.sandbox import Network
from errand.sandbox._egress.ledger import EgressLedger
from errand.sandbox._egress.proxy import EgressProxy


async def asked(log: Path, policy: Network, request: bytes, sandbox_id: str = "sb-asked") -> tuple[bytes, EgressLedger]:
    """What the proxy answered ``request`` (read to the end), and the sandbox's ledger once the
    refusal, if the answer was one, is in it (a refusal is recorded as its connection ends)."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    proxy = EgressProxy()
    await proxy.serve(sandbox_id, listener, policy, log)
    ledger = proxy._ledgers[sandbox_id]
    try:
        reader, writer = await asyncio.open_connection(*listener.getsockname())
        writer.write(request)
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), 60)
        writer.close()
        for _ in range(500):
            if ledger.refusals or answer.startswith(b"HTTP/1.1 2"):
                break
            await asyncio.sleep(0.01)
    finally:
        await proxy.stop(sandbox_id)
    return answer, ledger
