"""A sandbox's egress as the task's ``egress`` event: per host the connections and bytes, the
busiest first; the first refusals, how many more and the last ones; exact counts per host and
reason however many there were; nothing when no connection was tried."""

from __future__ import annotations

from errand.sandbox._egress.ledger import EgressEvent, EgressLedger
from errand.tasks.round.egress_log import MAX_HOSTS, MAX_REFUSALS, egress_record


def ledger_of(*events: EgressEvent) -> EgressLedger:
    ledger = EgressLedger()
    for event in events:
        ledger.add(event)
    return ledger


def opened(time: float, host: str, port: int = 443) -> EgressEvent:
    return EgressEvent(time, host, port, "allowed", "allowed by policy", address="10.0.0.1")


def refused(time: float, host: str, reason: str = "not allowed") -> EgressEvent:
    return EgressEvent(time, host, 443, "denied", f"{host} is {reason}")


def test_no_connection_tried_is_no_event() -> None:
    assert egress_record("agent", EgressLedger()) is None


def test_hosts_reached_busiest_first_with_their_bytes_and_the_refusals_with_their_reasons() -> None:
    ledger = ledger_of(opened(1, "mirror.test"), opened(2, "cdn.test"), opened(3, "cdn.test"),
                       EgressEvent(4, "cdn.test", 443, "closed", "connection ended", 100, 2000),
                       refused(5, "evil.test"), refused(6, "evil.test"), refused(7, "other.test", "too slow"))
    record = egress_record("setup", ledger)
    assert record is not None
    assert record["role"] == "setup"
    assert record["hosts"] == [
        {"host": "cdn.test", "port": 443, "connections": 2, "bytes_out": 100, "bytes_in": 2000},
        {"host": "mirror.test", "port": 443, "connections": 1, "bytes_out": 0, "bytes_in": 0}]
    assert record["more_hosts"] == 0
    assert record["refused"] == [{"time": 5, "host": "evil.test", "port": 443, "reason": "evil.test is not allowed"},
                                 {"time": 6, "host": "evil.test", "port": 443, "reason": "evil.test is not allowed"},
                                 {"time": 7, "host": "other.test", "port": 443, "reason": "other.test is too slow"}]
    assert (record["more_refused"], record["last_refused"]) == (0, [])
    assert record["refusal_counts"] == [
        {"host": "evil.test", "port": 443, "reason": "evil.test is not allowed", "count": 2},
        {"host": "other.test", "port": 443, "reason": "other.test is too slow", "count": 1}]


def test_a_flood_keeps_the_first_and_last_refusals_and_exact_counts_within_bounds() -> None:
    flood = 3 * MAX_REFUSALS + 7
    ledger = ledger_of(*(refused(n, "evil.test") for n in range(flood)),
                       *(opened(10_000 + n, f"host{n}.test") for n in range(MAX_HOSTS + 5)))
    record = egress_record("agent", ledger)
    assert record is not None
    assert [r["time"] for r in record["refused"]] == list(range(MAX_REFUSALS))
    assert record["more_refused"] == flood - MAX_REFUSALS
    assert [r["time"] for r in record["last_refused"]] == list(range(flood - MAX_REFUSALS, flood))
    assert record["refusal_counts"] == [{"host": "evil.test", "port": 443, "reason": "evil.test is not allowed",
                                         "count": flood}]
    assert len(record["hosts"]) == MAX_HOSTS and record["more_hosts"] == 5


def test_only_refused_hosts_are_no_host_reached() -> None:
    record = egress_record("checks", ledger_of(refused(1, "evil.test")))
    assert record is not None and record["hosts"] == [] and record["more_refused"] == 0
