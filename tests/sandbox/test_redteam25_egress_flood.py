"""Red team for issue 25 (FAILS on main): a flood of refusals keeps the log bounded by dropping its
*first* half, so the refusal that mattered (the first one) and the count the task's egress record
promises ("the first 50, and how many more") are lost."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from errand.sandbox._egress.proxy import ProxyTimeouts
from errand.tasks.egress_log import egress_record
from sandbox.test_egress_refusals import Running, start

pytestmark = [pytest.mark.faults, pytest.mark.slow]


async def _refused(running: Running, host: str) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", running.port)
    writer.write(f"CONNECT {host}:443 HTTP/1.1\r\nHost: {host}:443\r\n\r\n".encode())
    await writer.drain()
    await reader.read()
    writer.close()


async def test_the_first_refusal_survives_a_flood(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    running = await start(tmp_path, monkeypatch, ProxyTimeouts())
    try:
        await _refused(running, "the-one-that-mattered.test")
        await running.denied(1)
        flood = 6000
        host = "flood-" + "x" * 180 + ".test"  # ~400 bytes a line: 6000 lines are over the 1 MiB bound
        for start_at in range(0, flood, 50):
            await asyncio.gather(*(_refused(running, host) for _ in range(min(50, flood - start_at))))
        events = await running.denied(1)
        record = egress_record("setup", running.events())
        assert record is not None
        assert any(e.host == "the-one-that-mattered.test" for e in events), len(events)
        assert len(record["refused"]) + record["more_refused"] == flood + 1, record["more_refused"]
    finally:
        await running.stop()
