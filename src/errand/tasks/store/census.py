"""The store's figures for an operator: what ``/metrics`` exports and ``/readyz`` checks.

Everything here is read from the store at the moment it is asked, so a server that
runs no rounds itself (the Temporal dispatcher, or a server beside ``errand worker``
processes) still reports every worker's work, and a restarted server loses no count.

Two kinds of reading:

* :func:`take` — what holds *now*: tasks by state, the age of the oldest queued
  task, live workers, and the rounds' durations (a histogram over every ended run).
* :class:`Tally` — what has *happened*: events by kind and the model calls' tokens
  and cost, for Prometheus counters. The event log only grows, so a tally keeps what
  it has counted and each reading scans only the newer events. An event id is handed
  out before its row commits, and on PostgreSQL a later id may commit first; the
  tally therefore settles only events older than :data:`SETTLE_SECONDS` and counts
  the newer ones afresh on every reading, so a late commit is never skipped.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import sqlalchemy as sa

from errand.tasks.events import CallUsage, EgressSeen
from errand.tasks.lifecycle import TaskState
from errand.tasks.store.schema import events, runs, tasks, workers
from errand.tasks.store.tasks import TaskStore

__all__ = ["ROUND_BUCKETS", "SETTLE_SECONDS", "Census", "ModelUsage", "RoundDurations", "Tally", "kinds_total",
           "take"]

#: Upper bounds (seconds) of the round-duration histogram: a scripted round takes well under
#: a second, a real agent's minutes, a stuck one an hour.
ROUND_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)
#: An event older than this has committed (or its transaction failed): its count is settled.
SETTLE_SECONDS = 120.0
#: The event kinds whose data carry a model call's usage, and the one that records a sandbox's egress.
USAGE_KINDS = ("model", "condensed")
EGRESS_KIND = "egress"


@dataclass(frozen=True)
class RoundDurations:
    """Ended runs: how many, their summed seconds, and cumulative counts per upper bound."""

    count: int
    total_seconds: float
    buckets: tuple[tuple[float, int], ...]


@dataclass(frozen=True)
class Census:
    tasks_by_state: dict[str, int]
    oldest_queued_age: float | None  # seconds the oldest queued task has waited; None: none queued
    live_workers: int
    running_runs: int
    rounds: RoundDurations


def take(store: TaskStore, *, now: float | None = None) -> Census:
    """What the store holds now (one connection, a handful of aggregate queries)."""
    now = time.time() if now is None else now
    with store.engine.connect() as connection:
        by_state = {state.value: 0 for state in TaskState}
        for state, count in connection.execute(sa.select(tasks.c.state, sa.func.count()).group_by(tasks.c.state)):
            by_state[str(state)] = int(count)
        oldest = connection.execute(sa.select(sa.func.min(tasks.c.updated_at))
                                    .where(tasks.c.state == TaskState.QUEUED.value)).scalar()
        live = connection.execute(sa.select(sa.func.count()).select_from(workers)
                                  .where(workers.c.expires_at > now)).scalar_one()
        running = connection.execute(sa.select(sa.func.count()).select_from(runs)
                                     .where(runs.c.state == "running")).scalar_one()
        rounds = _round_durations(connection)
    return Census(by_state, None if oldest is None else max(0.0, now - float(oldest)), int(live), int(running),
                  rounds)


def _round_durations(connection: sa.Connection) -> RoundDurations:
    seconds = runs.c.ended_at - runs.c.started_at
    columns = [sa.func.count(), sa.func.coalesce(sa.func.sum(seconds), 0.0)]
    columns += [sa.func.coalesce(sa.func.sum(sa.case((seconds <= bound, 1), else_=0)), 0) for bound in ROUND_BUCKETS]
    row = connection.execute(sa.select(*columns).where(runs.c.ended_at.is_not(None))).one()
    return RoundDurations(int(row[0]), float(row[1]),
                          tuple((bound, int(count)) for bound, count in zip(ROUND_BUCKETS, row[2:], strict=True)))


@dataclass
class ModelUsage:
    """Model calls' usage, and (beside it, as it is read from the same events) egress refusals."""

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0
    egress_refusals: int = 0

    def add(self, data: object) -> None:
        """One model call's event data, as its row holds it."""
        if not isinstance(data, dict):
            return
        call = CallUsage.from_data(data)
        self.calls += 1
        self.input_tokens += call.input_tokens
        self.output_tokens += call.output_tokens
        self.cost += call.cost or 0.0

    def refused(self, data: object) -> None:
        """One sandbox's egress record: the refusals it lists and the count of those it does not."""
        self.egress_refusals += EgressSeen.from_data(data).refusals

    def plus(self, other: ModelUsage) -> ModelUsage:
        return ModelUsage(self.calls + other.calls, self.input_tokens + other.input_tokens,
                          self.output_tokens + other.output_tokens, self.cost + other.cost,
                          self.egress_refusals + other.egress_refusals)


@dataclass
class Tally:
    """Events by kind and model usage since the store began, read incrementally (see the module)."""

    settle_seconds: float = SETTLE_SECONDS
    _settled_id: int = 0
    _kinds: Counter[str] = field(default_factory=Counter)
    _usage: ModelUsage = field(default_factory=ModelUsage)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def read(self, store: TaskStore, *, now: float | None = None) -> tuple[Counter[str], ModelUsage]:
        """Every event's kind counted once, and every model call's usage summed."""
        now = time.time() if now is None else now
        with self._lock, store.engine.connect() as connection:
            self._settle(connection, now - self.settle_seconds)
            fresh_kinds, fresh_usage = _count(connection, events.c.id > self._settled_id)
            return self._kinds + fresh_kinds, self._usage.plus(fresh_usage)

    def _settle(self, connection: sa.Connection, before: float) -> None:
        # The newest id among events old enough to have committed; everything up to it is final.
        upto = connection.execute(sa.select(sa.func.max(events.c.id))
                                  .where(events.c.id > self._settled_id, events.c.time < before)).scalar()
        if upto is None:
            return
        kinds, usage = _count(connection, events.c.id > self._settled_id, events.c.id <= upto)
        self._kinds += kinds
        self._usage = self._usage.plus(usage)
        self._settled_id = int(upto)


def _count(connection: sa.Connection, *where: sa.ColumnElement[bool]) -> tuple[Counter[str], ModelUsage]:
    kinds: Counter[str] = Counter()
    for kind, count in connection.execute(sa.select(events.c.kind, sa.func.count()).where(*where)
                                          .group_by(events.c.kind)):
        kinds[str(kind)] = int(count)
    usage = ModelUsage()
    for kind, data in connection.execute(sa.select(events.c.kind, events.c.data)
                                         .where(*where, events.c.kind.in_((*USAGE_KINDS, EGRESS_KIND)))):
        if kind == EGRESS_KIND:
            usage.refused(data)
        else:
            usage.add(data)
    return kinds, usage


def kinds_total(kinds: Mapping[str, int], names: Sequence[str]) -> int:
    return sum(kinds.get(name, 0) for name in names)
