"""A sandbox's egress log as a task keeps it: read when the sandbox ends, one ``egress`` event.

The proxy logs every connection of a sandbox (opened, closed with its bytes, or refused
with its reason) in a file that goes when the sandbox does. Before a task's sandbox ends
(setup's, each attempt's agent's, the checks'), that log is folded into one event of the
task's log: per host and port, the connections carried and their bytes; each refusal
with its time and reason (the first :data:`MAX_REFUSALS`, how many more, and the last
ones), and how many each host had for each reason. The counts are exact however long the
sandbox ran: the proxy tallies them as it goes (``errand.sandbox.EgressLedger``). So why an
install failed ("the request head did not arrive within 120s", "example.org is not
allowed") can be read with ``errand logs``, ``errand show`` and on the task page, from
any machine that reads the store.
"""

from __future__ import annotations

import contextlib
import logging
import subprocess
from collections.abc import Awaitable, Callable, Collection
from typing import Any

from errand.errors import ErrandError
from errand.sandbox import AsyncSandbox, EgressEvent, EgressLedger
from errand.sandbox.network import HostPattern
from errand.sandbox.registries import REGISTRY_KINDS, host_registries

__all__ = ["MAX_HOSTS", "MAX_REFUSALS", "egress_record", "end_sandbox", "refusals_note"]

MAX_REFUSALS = 50
MAX_HOSTS = 50
log = logging.getLogger("errand.engine")


def egress_record(role: str, ledger: EgressLedger) -> dict[str, Any] | None:
    """The ``egress`` event's data for a sandbox of ``role`` whose proxy tallied ``ledger``
    (None when it logged nothing: no connection was tried). Its counts are exact however
    many events there were; its refusals are the first ones, then the last ones."""
    if not ledger.events:
        return None
    reached = [(key, tally) for key, tally in ledger.hosts.items()
               if tally.connections or tally.bytes_out or tally.bytes_in]
    busiest = [{"host": host, "port": port, "connections": tally.connections, "bytes_out": tally.bytes_out,
                "bytes_in": tally.bytes_in}
               for (host, port), tally in sorted(reached, key=lambda item: -item[1].connections)]
    refused = [_refusal(event) for event in ledger.first_refusals[:MAX_REFUSALS]]
    last = [_refusal(event) for event in ledger.last_refusals] if ledger.refusals > MAX_REFUSALS else []
    return {"role": role, "hosts": busiest[:MAX_HOSTS], "more_hosts": max(len(busiest) - MAX_HOSTS, 0),
            "refused": refused, "more_refused": ledger.refusals - len(refused),
            "last_refused": last[-MAX_REFUSALS:], "refusal_counts": _refusal_counts(ledger)}


def _refusal(event: EgressEvent) -> dict[str, Any]:
    return {"time": event.time, "host": event.host, "port": event.port, "reason": event.reason}


def _refusal_counts(ledger: EgressLedger) -> list[dict[str, Any]]:
    """How many refusals each host and reason had, the most first (exact; at most MAX_REFUSALS rows)."""
    counts = [(count, host, port, reason)
              for (host, port), tally in ledger.hosts.items() for reason, count in tally.refused.items()]
    return [{"host": host, "port": port, "reason": reason, "count": count}
            for count, host, port, reason in sorted(counts, key=lambda row: -row[0])[:MAX_REFUSALS]]


async def end_sandbox(sandbox: AsyncSandbox, journal: Callable[[str, dict[str, Any]], Awaitable[None]],
                      role: str) -> None:
    """End ``sandbox``, its egress log written to ``journal`` first. The log is help, never a
    gate: failing to read or write it is logged, the sandbox ends all the same, and no error
    of its own replaces the one that may be ending the sandbox (a setup command's)."""
    try:
        record = None
        with contextlib.suppress(ErrandError, OSError, ValueError, TypeError):
            record = egress_record(role, await sandbox.egress_ledger())
        if record is not None:
            await journal("egress", record)
    except Exception as error:  # noqa: BLE001 - the store's errors are not errand's own
        log.warning("sandbox %s: its egress log was not kept: %s", sandbox.id, error)
    finally:
        await sandbox.terminate()


async def refusals_note(sandbox: AsyncSandbox, registries: Collection[str] | None = None) -> str:
    """For a failure's message: how many connections the sandbox's proxy refused so far, if any
    (a failed install is often a refused one), and where to read why; the hosts that did not answer
    (an index or registry down: its installer's retries ran out) and what to do. Given the ``registries``
    setup may reach, a refused host of another of the host's registries says how to allow it."""
    with contextlib.suppress(ErrandError, OSError, ValueError, TypeError):
        ledger = await sandbox.egress_ledger()
        if ledger.refusals:
            note = (f"; the egress proxy refused {ledger.refusals} connection{'' if ledger.refusals == 1 else 's'} "
                    "of it (`errand logs` says which and why)")
            away = ledger.unanswered()
            if away:
                named = ", ".join(f"{host}:{port}" for host, port in away[:3]) + (", …" if len(away) > 3 else "")
                note += (f"; {named} did not answer (down or unreachable: not refused by the policy); if a package "
                         "index or registry it installs from is away, `errand retry` the task once it is back")
            wanted = _registries_refused(ledger, registries) if registries is not None else []
            if wanted:
                listed = ", ".join(f'"{kind}"' for kind in [*(registries or ()), *wanted])
                note += (f"; {' and '.join(wanted)} registry hosts among them: setup reaches them with "
                         f"`registries = [{listed}]` in errand.toml's [setup] network table")
            return note
    return ""


def _registries_refused(ledger: EgressLedger, given: Collection[str]) -> list[str]:
    """The kinds of the host's registries (pip, npm, apt), not ``given``, that a refused host is one of."""
    refused = [(host, port) for (host, port), tally in ledger.hosts.items() if tally.refused]
    wanted = []
    for kind in REGISTRY_KINDS:
        if kind in given:
            continue
        try:
            patterns = [HostPattern.parse(domain) for domain in host_registries([kind]).domains]
        except (ErrandError, OSError, subprocess.SubprocessError):  # a tool that cannot say: no advice
            continue
        if any(pattern.covers(host, port, "https" if port == 443 else "http")
               for pattern in patterns for host, port in refused):
            wanted.append(kind)
    return wanted
