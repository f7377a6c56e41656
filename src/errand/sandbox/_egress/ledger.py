"""A sandbox's egress, tallied exactly in a fixed amount of memory.

A sandbox can open (or be refused) connections without end; its log must stay bounded
without losing what it is read for. So the ledger keeps, whatever the flood:

- exact counters per host and port (connections, bytes each way, refusals by reason),
  for the first :data:`TRACKED_HOSTS` hosts; every later one is tallied under
  :data:`OTHER_HOSTS`, so totals stay exact;
- the first :data:`KEPT_REFUSALS` refusals and the last :data:`KEPT_REFUSALS`, verbatim
  (the first refusal is usually the one that explains the rest);
- the last :data:`RECENT_EVENTS` events, for a look at what a sandbox is doing now.

The proxy feeds it every event and writes each one to the sandbox's log file, one JSON
line each; when the file outgrows its bound, the proxy rewrites it as one checkpoint line
(the ledger's state) and appends from there. A reader in any process rebuilds the same
ledger with :func:`read_ledger`: the last checkpoint, then the events after it.
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any

__all__ = ["KEPT_REFUSALS", "OTHER_HOSTS", "REASONS_PER_HOST", "RECENT_EVENTS", "TRACKED_HOSTS", "UNANSWERED",
           "EgressEvent", "EgressLedger", "HostTally", "read_ledger", "read_log"]

KEPT_REFUSALS = 50
RECENT_EVENTS = 200
TRACKED_HOSTS = 100
REASONS_PER_HOST = 8
OTHER_HOSTS = ("*", 0)  # the tally of every host past the first TRACKED_HOSTS
#: How the reason of a refusal begins when the policy let the connection out but its host did not
#: answer (refused it, unreachable, timed out): a host down, not one the sandbox may not reach.
UNANSWERED = "cannot connect to "
OTHER_REASONS = "(other reasons)"
_REASON_KEY = 240  # characters of a reason used as a counter's key
_HOST_KEPT = 255  # characters of a host kept (a DNS name has at most 253; a CONNECT target may have 64 KiB)
_REASON_KEPT = 1000  # characters of a reason kept
_CHECKPOINT = "ledger"  # the key that marks a checkpoint line in the log file


@dataclass(frozen=True)
class EgressEvent:
    time: float
    host: str
    port: int
    verdict: str  # "allowed" (opened), "denied" (refused, whatever the cause), or "closed" (with its bytes)
    reason: str
    bytes_out: int = 0
    bytes_in: int = 0
    address: str = ""


@dataclass
class HostTally:
    """Exact counts for one host and port."""

    connections: int = 0
    bytes_out: int = 0
    bytes_in: int = 0
    refused: dict[str, int] = field(default_factory=dict)  # reason -> how many
    #: Refusals because the host did not answer, counted apart: past REASONS_PER_HOST other reasons,
    #: theirs are "(other reasons)" in ``refused``, and the host was no longer said to be down.
    unanswered: int = 0

    def add(self, event: EgressEvent) -> None:
        if event.verdict == "allowed":
            self.connections += 1
        elif event.verdict == "closed":
            self.bytes_out += event.bytes_out
            self.bytes_in += event.bytes_in
        elif event.verdict == "denied":
            reason = event.reason[:_REASON_KEY]
            if reason.startswith(UNANSWERED):
                self.unanswered += 1
            if reason not in self.refused and len(self.refused) >= REASONS_PER_HOST:
                reason = OTHER_REASONS
            self.refused[reason] = self.refused.get(reason, 0) + 1


class EgressLedger:
    """Every event of one sandbox's egress, counted exactly; a bounded few kept verbatim."""

    def __init__(self) -> None:
        self.hosts: dict[tuple[str, int], HostTally] = {}
        self.events = 0
        self.refusals = 0
        self.first_refusals: list[EgressEvent] = []
        self.last_refusals: deque[EgressEvent] = deque(maxlen=KEPT_REFUSALS)
        self.recent: deque[EgressEvent] = deque(maxlen=RECENT_EVENTS)

    def add(self, event: EgressEvent) -> None:
        if len(event.host) > _HOST_KEPT or len(event.reason) > _REASON_KEPT:
            event = replace(event, host=event.host[:_HOST_KEPT], reason=event.reason[:_REASON_KEPT])
        self.events += 1
        self.recent.append(event)
        key = (event.host, event.port)
        if key not in self.hosts and len(self.hosts) >= TRACKED_HOSTS:
            key = OTHER_HOSTS
        self.hosts.setdefault(key, HostTally()).add(event)
        if event.verdict == "denied":
            self.refusals += 1
            if len(self.first_refusals) < KEPT_REFUSALS:
                self.first_refusals.append(event)
            else:
                self.last_refusals.append(event)

    def unanswered(self) -> list[tuple[str, int]]:
        """The hosts (and ports) the policy let a connection out to that did not answer it."""
        return [key for key, tally in self.hosts.items()
                if key != OTHER_HOSTS and (tally.unanswered or any(reason.startswith(UNANSWERED)
                                                                      for reason in tally.refused))]

    def kept_events(self) -> list[EgressEvent]:
        """The events kept verbatim, in time order, each once: the first and last refusals
        and the recent events."""
        kept = dict.fromkeys([*self.first_refusals, *self.last_refusals, *self.recent])
        return sorted(kept, key=lambda event: event.time)

    def checkpoint(self) -> str:
        """The ledger as one line of the log file."""
        return json.dumps({_CHECKPOINT: {
            "events": self.events, "refusals": self.refusals,
            "hosts": [[host, port, vars(tally)] for (host, port), tally in self.hosts.items()],
            "first_refusals": [vars(event) for event in self.first_refusals],
            "last_refusals": [vars(event) for event in self.last_refusals],
            "recent": [vars(event) for event in self.recent]}})

    @classmethod
    def from_checkpoint(cls, state: dict[str, Any]) -> EgressLedger:
        ledger = cls()
        ledger.events, ledger.refusals = int(state["events"]), int(state["refusals"])
        for host, port, tally in state["hosts"]:
            ledger.hosts[(str(host), int(port))] = HostTally(**tally)
        ledger.first_refusals = [EgressEvent(**event) for event in state["first_refusals"]]
        ledger.last_refusals.extend(EgressEvent(**event) for event in state["last_refusals"])
        ledger.recent.extend(EgressEvent(**event) for event in state["recent"])
        return ledger


def read_ledger(text: str) -> EgressLedger:
    """The ledger a log file's ``text`` holds: its last checkpoint, then every event after it."""
    return read_log(text)[0]


def read_log(text: str) -> tuple[EgressLedger, list[EgressEvent]]:
    """The ledger a log file's ``text`` holds, and the events it holds verbatim (those its last
    checkpoint kept, then every one after it). A line cut short (a write in progress, read by
    another process) is left out."""
    ledger, events = EgressLedger(), []
    for line in text.splitlines():
        try:
            item = json.loads(line)
            if _CHECKPOINT in item:
                ledger = EgressLedger.from_checkpoint(item[_CHECKPOINT])
                events = ledger.kept_events()
            else:
                event = EgressEvent(**item)
                ledger.add(event)
                events.append(event)
        except (ValueError, TypeError, KeyError):
            continue
    return ledger, events
