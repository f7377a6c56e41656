"""A sandbox's egress log as a task keeps it: read when the sandbox ends, one ``egress`` event.

The proxy logs every connection of a sandbox (opened, closed with its bytes, or refused
with its reason) in a file that goes when the sandbox does. Before a task's sandbox ends
(setup's, each attempt's agent's, the checks'), that log is folded into one event of the
task's log: per host and port, the connections carried and their bytes; each refusal
with its time and reason (the first :data:`MAX_REFUSALS`, and how many more). So why an
install failed ("the request head did not arrive within 120s", "example.org is not
allowed") can be read with ``errand logs``, ``errand show`` and on the task page, from
any machine that reads the store.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from errand.errors import ErrandError
from errand.sandbox import AsyncSandbox, EgressEvent

__all__ = ["MAX_HOSTS", "MAX_REFUSALS", "egress_record", "end_sandbox", "refusals_note"]

MAX_REFUSALS = 50
MAX_HOSTS = 50
log = logging.getLogger("errand.engine")


def egress_record(role: str, events: Sequence[EgressEvent]) -> dict[str, Any] | None:
    """The ``egress`` event's data for a sandbox of ``role`` whose proxy logged ``events``
    (None when it logged nothing: no connection was tried)."""
    if not events:
        return None
    hosts: dict[tuple[str, int], dict[str, Any]] = {}
    refused: list[dict[str, Any]] = []
    for event in events:
        if event.verdict == "denied":
            refused.append({"time": event.time, "host": event.host, "port": event.port, "reason": event.reason})
            continue
        entry = hosts.setdefault((event.host, event.port), {"host": event.host, "port": event.port,
                                                            "connections": 0, "bytes_out": 0, "bytes_in": 0})
        if event.verdict == "allowed":
            entry["connections"] += 1
        elif event.verdict == "closed":
            entry["bytes_out"] += event.bytes_out
            entry["bytes_in"] += event.bytes_in
    busiest = sorted(hosts.values(), key=lambda entry: -entry["connections"])
    return {"role": role, "hosts": busiest[:MAX_HOSTS], "more_hosts": max(len(busiest) - MAX_HOSTS, 0),
            "refused": refused[:MAX_REFUSALS], "more_refused": max(len(refused) - MAX_REFUSALS, 0)}


async def end_sandbox(sandbox: AsyncSandbox, journal: Callable[[str, dict[str, Any]], Awaitable[None]],
                      role: str) -> None:
    """End ``sandbox``, its egress log written to ``journal`` first. The log is help, never a
    gate: failing to read or write it is logged, the sandbox ends all the same, and no error
    of its own replaces the one that may be ending the sandbox (a setup command's)."""
    try:
        record = None
        with contextlib.suppress(ErrandError, OSError, ValueError, TypeError):
            record = egress_record(role, await sandbox.egress_log())
        if record is not None:
            await journal("egress", record)
    except Exception as error:  # noqa: BLE001 - the store's errors are not errand's own
        log.warning("sandbox %s: its egress log was not kept: %s", sandbox.id, error)
    finally:
        await sandbox.terminate()


async def refusals_note(sandbox: AsyncSandbox) -> str:
    """For a failure's message: how many connections the sandbox's proxy refused so far, if any
    (a failed install is often a refused one), and where to read why."""
    with contextlib.suppress(ErrandError, OSError, ValueError, TypeError):
        refused = sum(1 for event in await sandbox.egress_log() if event.verdict == "denied")
        if refused:
            return (f"; the egress proxy refused {refused} connection{'' if refused == 1 else 's'} of it "
                    "(`errand logs` says which and why)")
    return ""
