"""The egress ledger: exact counts and the first refusals, in a bound, however long the log.

Fed as the proxy feeds it (an event at a time, each also a line of the log file), it must
count exactly what a reader of the whole history would count, keep the real first refusals,
stay within its size bound however many hosts and reasons a sandbox throws at it, and be
rebuilt the same from a log file that was rewritten as a checkpoint on the way.
"""

from __future__ import annotations

import json

from errand.sandbox._egress.ledger import (
    KEPT_REFUSALS,
    OTHER_HOSTS,
    REASONS_PER_HOST,
    RECENT_EVENTS,
    TRACKED_HOSTS,
    UNANSWERED,
    EgressEvent,
    EgressLedger,
    read_ledger,
    read_log,
)


def _events(count: int) -> list[EgressEvent]:
    """A noisy history: many hosts, allowed and closed connections with bytes, refusals with
    reasons naming the host (so reasons are many too)."""
    events = []
    for n in range(count):
        host = f"host{n % 997}.test"
        if n % 3 == 0:
            events.append(EgressEvent(float(n), host, 443, "denied", f"{host} is not allowed (try {n % 11})"))
        elif n % 3 == 1:
            events.append(EgressEvent(float(n), host, 443, "allowed", "allowed by policy", address="10.0.0.1"))
        else:
            events.append(EgressEvent(float(n), host, 443, "closed", "connection ended", n, 2 * n, "10.0.0.1"))
    return events


def test_counts_are_exact_and_the_first_refusals_are_the_first() -> None:
    history = _events(30000)
    ledger = EgressLedger()
    for event in history:
        ledger.add(event)
    refusals = [e for e in history if e.verdict == "denied"]
    assert ledger.events == len(history) and ledger.refusals == len(refusals)
    assert ledger.first_refusals == refusals[:KEPT_REFUSALS]
    assert list(ledger.last_refusals) == refusals[-KEPT_REFUSALS:]
    assert list(ledger.recent) == history[-RECENT_EVENTS:]
    assert len(ledger.hosts) == TRACKED_HOSTS + 1  # the rest are tallied together
    tallies = ledger.hosts.values()
    assert sum(t.connections for t in tallies) == sum(e.verdict == "allowed" for e in history)
    assert sum(t.bytes_in for t in tallies) == sum(e.bytes_in for e in history)
    assert sum(sum(t.refused.values()) for t in tallies) == len(refusals)
    assert ledger.hosts[OTHER_HOSTS].connections > 0
    assert len(ledger.checkpoint()) < 512 * 1024  # the bound does not grow with the history


def test_a_rewritten_log_reads_back_the_same_ledger() -> None:
    history = _events(9000)
    written = EgressLedger()
    lines: list[str] = []
    for n, event in enumerate(history):
        written.add(event)
        lines.append(json.dumps(vars(event)))
        if n == 5000:  # the proxy's rewrite: one checkpoint line, then appending goes on
            lines = [written.checkpoint()]
    lines.append('{"time": 1.0, "host": "cut-sh')  # a write in progress, seen by another process
    ledger, events = read_log("\n".join(lines))
    assert ledger.checkpoint() == written.checkpoint()
    assert events[:KEPT_REFUSALS] == written.first_refusals
    assert events[-1] == history[-1] and len(events) < len(history)
    assert read_ledger("").events == 0


def test_a_huge_host_name_is_kept_clipped() -> None:
    ledger = EgressLedger()
    for n in range(2 * TRACKED_HOSTS):
        ledger.add(EgressEvent(float(n), f"{n}" + "h" * 60000, 443, "denied", "not allowed " + "r" * 60000))
    assert ledger.refusals == 2 * TRACKED_HOSTS
    assert len(ledger.checkpoint()) < 1 << 20


def test_a_host_that_stopped_answering_after_many_other_refusals_is_still_said_not_to_answer() -> None:
    """Refusal reasons are kept per host up to a bound, then counted as "(other reasons)". A host
    that was refused for many other reasons first and then did not answer is still one that did
    not answer, in the ledger and in the ledger read back from its checkpoint."""
    ledger = EgressLedger()
    for n in range(REASONS_PER_HOST + 2):
        ledger.add(EgressEvent(float(n), "index.test", 443, "denied", f"a malformed request (try {n})"))
    ledger.add(EgressEvent(99.0, "index.test", 443, "denied", f"{UNANSWERED}index.test:443 (Connection refused)"))
    assert ledger.unanswered() == [("index.test", 443)]
    assert read_ledger(ledger.checkpoint()).unanswered() == [("index.test", 443)]
    assert EgressLedger().unanswered() == []
