"""A flood of refusals (found by red team 25): the egress log stays bounded, yet the refusal
that mattered (the first one) and the exact count the task's egress record promises ("the
first 50, and how many more") survive; a live subscriber that stops reading is bounded too,
and told how many events it missed."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from errand.sandbox._egress.ledger import read_ledger
from errand.sandbox._egress.proxy import LIVE_BACKLOG, EgressEvent, ProxyTimeouts
from errand.tasks.round.egress_log import MAX_REFUSALS, egress_record
from sandbox.test_egress_refusals import SANDBOX, Running, start

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
        stalled = running.proxy.subscribe(SANDBOX)  # a live reader that never reads
        flood = 6000
        host = "flood-" + "x" * 180 + ".test"  # ~400 bytes a line: 6000 lines are over the 1 MiB bound
        for start_at in range(0, flood, 50):
            await asyncio.gather(*(_refused(running, host) for _ in range(min(50, flood - start_at))))
        events = await running.denied(1)
        assert running.log.stat().st_size < 2 << 20  # bounded, and it was rewritten on the way
        ledger = read_ledger(running.log.read_text())
        record = egress_record("setup", ledger)
        assert record is not None
        assert any(e.host == "the-one-that-mattered.test" for e in events), len(events)
        assert record["refused"][0]["host"] == "the-one-that-mattered.test", record["refused"][0]
        assert len(record["refused"]) == MAX_REFUSALS
        assert len(record["refused"]) + record["more_refused"] == flood + 1, record["more_refused"]
        assert [r["host"] for r in record["last_refused"]] == [host] * MAX_REFUSALS
        assert {(r["host"], r["count"]) for r in record["refusal_counts"]} == {
            ("the-one-that-mattered.test", 1), (host, flood)}

        assert stalled.qsize() <= LIVE_BACKLOG + 2
        await running.stop()
        seen: list[EgressEvent] = []
        while (event := stalled.get_nowait()) is not None:
            seen.append(event)
        [marker] = [e for e in seen if e.verdict == "dropped"]
        dropped = int(marker.reason.split()[1])
        assert len(seen) - 1 + dropped == flood, (len(seen), marker.reason)
    finally:
        await running.stop()
