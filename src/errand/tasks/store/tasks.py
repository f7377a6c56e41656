"""The task store: tasks, their runs, the events of every run, and reviews.

Every method is one short transaction. State changes are compare-and-set
(``UPDATE … WHERE state = :current``) so concurrent writers — two workers
claiming one task, a cancel racing a finish — never both succeed. On
PostgreSQL each write that changes a task also notifies listeners
(:mod:`errand.tasks.store.changes`) as it commits.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Self

import sqlalchemy as sa

from errand.database import SqlStore, open_engine, written_as
from errand.models.endpoint import ModelEndpoint
from errand.repo.accept import branch_name
from errand.tasks.errors import IllegalTransition, RunNotFound, RunNotRunning, StateConflict, TaskNotFound
from errand.tasks.events import FORWARDED_KINDS, Recovered
from errand.tasks.lifecycle import ACTIVE, TaskState, transition
from errand.tasks.records import Event, Recovery, Review, Run, RunState, Task, Verdict
from errand.tasks.store.changes import CHANNEL, notify
from errand.tasks.store.schema import events, reviews, runs, tasks, workers

__all__ = ["LOST_RULE", "MAX_LOST_BEFORE_A_RUN", "TaskStore", "insert_event", "move_state", "next_queued",
           "requeue_lost", "task_record", "task_row"]

_VERDICT_STATE = {
    Verdict.ACCEPTED: TaskState.ACCEPTED,
    Verdict.REJECTED: TaskState.REJECTED,
    Verdict.FOLLOWUP: TaskState.QUEUED,
}


class TaskStore(SqlStore):
    """Tasks, runs, events and reviews in one SQL database."""

    @classmethod
    def open(cls, url: str | None = None, *, patience: float = 0.0) -> Self:
        """Open (creating and migrating to the newest schema) the store at ``url``, waiting up to
        ``patience`` seconds for a database that cannot be reached (then, or at once without it,
        :class:`~errand.database.StoreUnreachable`).

        Without ``url``, ``errand.db`` in errand's home directory (``ERRAND_HOME``).
        """
        return cls(open_engine(url, patience=patience))

    # -- tasks -------------------------------------------------------------

    def create_task(
        self, *, title: str, instruction: str, repo: str, base_ref: str = "HEAD", model: str | None = None,
        attempts: int = 1, parent_id: str | None = None, base_commit: str | None = None,
        model_endpoint: ModelEndpoint | None = None, agent: str | None = None,
    ) -> Task:
        """Record a new task in ``queued``; its branch is ``errand/<id>-<slug of title>``."""
        now = time.time()
        with self._write() as connection:
            task_id = _new_task_id(connection)
            row = {
                "id": task_id, "title": title, "instruction": instruction, "repo": repo, "base_ref": base_ref,
                "base_commit": base_commit, "model": model, "attempts": attempts, "state": TaskState.QUEUED.value,
                "agent": agent,
                "model_endpoint": model_endpoint.to_json() if model_endpoint is not None else None,
                "branch": branch_name(task_id, title), "parent_id": parent_id, "claimed_by": None,
                "created_at": now, "updated_at": now,
            }
            connection.execute(tasks.insert().values(row))
            notify(connection, task_id)
        return task_record(row)

    def create_reviewable(self, *, title: str, instruction: str, repo: str, base_ref: str, base_commit: str,
                          worker: str, result: dict[str, Any], events: Sequence[tuple[str, Any]] = ()) -> Task:
        """Record a task the host did itself, without an agent (``errand memory export``): the task,
        its one run (succeeded, with ``result``), the run's ``events`` and ``ready_for_review``,
        in one transaction. It is never ``queued``, so no worker claims it; from here it is
        reviewed like any task."""
        now = time.time()
        with self._write() as connection:
            task_id = _new_task_id(connection)
            row = {
                "id": task_id, "title": title, "instruction": instruction, "repo": repo, "base_ref": base_ref,
                "base_commit": base_commit, "model": None, "attempts": 1, "state": TaskState.READY_FOR_REVIEW.value,
                "model_endpoint": None, "branch": branch_name(task_id, title), "parent_id": None, "agent": None,
                "claimed_by": worker, "created_at": now, "updated_at": now,
            }
            connection.execute(tasks.insert().values(row))
            run_id = f"{task_id}-r1"
            connection.execute(runs.insert().values(
                id=run_id, task_id=task_id, attempt=1, round=1, state=RunState.SUCCEEDED.value, worker=worker,
                started_at=now, ended_at=now, result=result))
            for kind, data in events:
                insert_event(connection, task_id, run_id, kind, data)
            insert_event(connection, task_id, None, "ready_for_review", {
                "run_id": run_id, "confidence": result.get("evidence", {}).get("confidence", {}).get("level")})
            notify(connection, task_id)
        return task_record(row)

    def get_task(self, task_id: str) -> Task:
        with self._read() as connection:
            return task_record(task_row(connection, task_id))

    def list_tasks(
        self, *, state: TaskState | str | None = None, repo: str | None = None, limit: int = 50,
        before: str | None = None,
    ) -> list[Task]:
        """Newest first. For the next page pass ``before=`` the last task's id (keyset, stable under inserts)."""
        query = sa.select(tasks).order_by(tasks.c.created_at.desc(), tasks.c.id.desc()).limit(limit)
        if state is not None:
            query = query.where(tasks.c.state == TaskState(state).value)
        if repo is not None:
            query = query.where(tasks.c.repo == repo)
        with self._read() as connection:
            if before is not None:
                cursor = task_row(connection, before)
                query = query.where(
                    sa.or_(
                        tasks.c.created_at < cursor["created_at"],
                        sa.and_(tasks.c.created_at == cursor["created_at"], tasks.c.id < before),
                    )
                )
            return [task_record(row) for row in connection.execute(query).mappings()]

    def set_state(
        self, task_id: str, target: TaskState | str, *, expected: TaskState | str | None = None,
        event: tuple[str, Any] | None = None,
    ) -> Task:
        """Move a task to ``target`` if the lifecycle allows it from the state it is in.

        With ``expected``, the move happens only from that state (compare-and-set):
        of several callers expecting the same state, exactly one wins and the others
        get :class:`StateConflict`. Raises :class:`IllegalTransition` when the move
        is not allowed; either way nothing changes. ``event`` (kind, data) is appended
        to the task's events in the same transaction: a reader who sees the new
        state also sees the event that says why.
        """
        target = TaskState(target)
        with self._write() as connection:
            current = TaskState(task_row(connection, task_id)["state"])
            if expected is not None and current != TaskState(expected):
                raise StateConflict(
                    f"task {task_id} is {current}, not {TaskState(expected)}; another writer changed it",
                    task_id=task_id, expected=TaskState(expected).value, actual=current.value,
                )
            move_state(connection, task_id, current, target)
            if event is not None:
                insert_event(connection, task_id, None, *event)
            return task_record(task_row(connection, task_id))

    # -- runs ----------------------------------------------------------------

    def start_run(self, task_id: str, worker: str, *, round: int | None = None) -> Run:  # noqa: A002
        """Record that ``worker`` began a run of the task; runs are numbered 1, 2, … per task.

        ``round`` groups the runs of one claim (parallel attempts share it); by
        default a run opens the round after the task's last one.
        """
        now = time.time()
        with self._write() as connection:
            task_row(connection, task_id)
            last_attempt, last_round = connection.execute(
                sa.select(sa.func.max(runs.c.attempt), sa.func.max(runs.c.round)).where(runs.c.task_id == task_id)
            ).one()
            attempt = (last_attempt or 0) + 1
            row = {
                "id": f"{task_id}-r{attempt}", "task_id": task_id, "attempt": attempt,
                "round": round if round is not None else (last_round or 0) + 1,
                "state": RunState.RUNNING.value, "worker": worker, "started_at": now, "ended_at": None,
                "result": None,
            }
            connection.execute(runs.insert().values(row))
        return _run(row)

    def next_round(self, task_id: str) -> int:
        """The number the task's next round takes (1 for a task never run)."""
        with self._read() as connection:
            last = connection.execute(sa.select(sa.func.max(runs.c.round)).where(runs.c.task_id == task_id))
            return int(last.scalar() or 0) + 1

    def claim_next(self, worker: str) -> Task | None:
        """Move the oldest queued task to ``preparing`` for ``worker``; None when none is queued.

        Of workers racing for one task exactly one gets it. On PostgreSQL the candidate
        row is locked as it is read (``FOR UPDATE SKIP LOCKED``), so racing workers take
        different tasks at once instead of retrying on the same one; SQLite's write lock,
        taken up front, makes claims take turns; so :meth:`any_queued` is asked first.
        """
        claimed = self.claim_round(worker, ())
        return None if claimed is None else claimed[0]

    def claim_round(self, worker: str, controls: Sequence[str]) -> tuple[Task, int] | None:
        """:meth:`claim_next`, and in the same transaction the id of the task's newest event of the
        ``controls`` kinds (0: none): what the round's holder has already seen. Read apart, a store
        gone between the two would leave the task claimed by a live worker that never ran it."""
        if not self.any_queued():
            return None
        with self._write() as connection:
            task_id = connection.execute(next_queued()).scalar()
            if task_id is None:
                return None
            move_state(connection, task_id, TaskState.QUEUED, TaskState.PREPARING, claimed_by=worker)
            seen = connection.execute(sa.select(sa.func.max(events.c.id)).where(
                events.c.task_id == task_id, events.c.kind.in_(list(controls)))).scalar() if controls else None
            return task_record(task_row(connection, task_id)), int(seen or 0)

    def any_queued(self) -> bool:
        """Whether a task waits to be claimed: a read, without the write lock a claim takes. A worker
        asks several times a second; with nothing queued, a long write elsewhere does not hold it
        up, nor it the writer."""
        with self._read() as connection:
            return connection.execute(sa.select(tasks.c.id).where(_QUEUED).limit(1)).first() is not None

    def finish_run(self, run_id: str, state: RunState | str, result: Any = None) -> Run:
        """End a running run as succeeded, failed or cancelled, with a JSON-able ``result``."""
        state = RunState(state)
        if state in (RunState.RUNNING, RunState.INTERRUPTED):
            raise ValueError(f"a run is finished as succeeded, failed or cancelled, not {state}")
        with self._write() as connection:
            _end_run(connection, run_id, state, result)
            return _run(_run_row(connection, run_id))

    def get_run(self, run_id: str) -> Run:
        with self._read() as connection:
            return _run(_run_row(connection, run_id))

    def runs(self, task_id: str, *, round: int | None = None) -> list[Run]:  # noqa: A002
        """The task's runs in order, or those of one ``round``."""
        query = sa.select(runs).where(runs.c.task_id == task_id).order_by(runs.c.attempt)
        if round is not None:
            query = query.where(runs.c.round == round)
        with self._read() as connection:
            return [_run(row) for row in connection.execute(query).mappings()]

    # -- events ----------------------------------------------------------------

    def append_event(self, task_id: str, run_id: str | None, kind: str, data: Any = None) -> int:
        """Append an event and return its id. Events of a run get seq 1, 2, … with no gaps.

        The seq comes from a counter on the run's row, bumped inside this
        transaction: the row lock (PostgreSQL) or the write lock (SQLite) makes
        concurrent appenders to one run take turns.
        """
        with self._write() as connection:
            return insert_event(connection, task_id, run_id, kind, data)

    def events(
        self, task_id: str, after_id: int = 0, limit: int = 1000, *, kinds: Sequence[str] | None = None,
        run_id: str | None = None,
    ) -> list[Event]:
        """The task's events with id greater than ``after_id``, oldest first (resume from the last id seen);
        only those of ``kinds`` or of one run when asked."""
        query = (
            sa.select(events).where(events.c.task_id == task_id, events.c.id > after_id)
            .order_by(events.c.id).limit(limit)
        )
        if kinds is not None:
            query = query.where(events.c.kind.in_(list(kinds)))
        if run_id is not None:
            query = query.where(events.c.run_id == run_id)
        with self._read() as connection:
            return [Event(**row) for row in connection.execute(query).mappings()]

    def events_since(self, after_id: int, kinds: Sequence[str], limit: int = 1000) -> list[Event]:
        """Every task's events of ``kinds`` with id greater than ``after_id``, oldest first: how
        an engine that serves many tasks reads what people sent them in one query."""
        query = (sa.select(events).where(events.c.id > after_id, events.c.kind.in_(list(kinds)))
                 .order_by(events.c.id).limit(limit))
        with self._read() as connection:
            return [Event(**row) for row in connection.execute(query).mappings()]

    def controls(self, after: Mapping[str, int], kinds: Sequence[str]) -> dict[str, tuple[TaskState, list[Event]]]:
        """For each task of ``after``: its state, and its events of ``kinds`` with an id greater than
        the one given for it, oldest first. One read for every round an engine holds, which it
        polls several times a second; a task no longer in the store is left out."""
        if not after:
            return {}
        ids = list(after)
        query = (sa.select(events).where(events.c.task_id.in_(ids), events.c.id > min(after.values()),
                                         events.c.kind.in_(list(kinds))).order_by(events.c.id))
        with self._read() as connection:
            found: dict[str, tuple[TaskState, list[Event]]] = {
                row.id: (TaskState(row.state), [])
                for row in connection.execute(sa.select(tasks.c.id, tasks.c.state).where(tasks.c.id.in_(ids)))}
            for row in connection.execute(query).mappings():
                if row["task_id"] in found and row["id"] > after[row["task_id"]]:
                    found[row["task_id"]][1].append(Event(**row))
        return found

    def last_event_id(self) -> int:
        """The id of the newest event of any task (0: none yet)."""
        with self._read() as connection:
            return int(connection.execute(sa.select(sa.func.max(events.c.id))).scalar() or 0)

    def last_forwarded_id(self) -> int:
        """The id of the newest event of the forwarded kinds (0: none yet), once every such event being
        written has been committed: where a reader of them starts, so it misses none still in flight."""
        with self._read() as connection:
            if connection.dialect.name == "postgresql":
                connection.execute(sa.text("SELECT pg_advisory_xact_lock(:space, 0)"), {"space": _FORWARDED_EVENTS})
            return int(connection.execute(sa.select(sa.func.max(events.c.id))
                                          .where(events.c.kind.in_(FORWARDED_KINDS))).scalar() or 0)

    def last_event(self, task_id: str, kinds: Sequence[str]) -> Event | None:
        """The task's newest event of one of ``kinds`` (an index walk, not a read of them all)."""
        query = (sa.select(events).where(events.c.task_id == task_id, events.c.kind.in_(list(kinds)))
                 .order_by(events.c.id.desc()).limit(1))
        with self._read() as connection:
            row = connection.execute(query).mappings().first()
        return Event(**row) if row is not None else None

    # -- reviews ---------------------------------------------------------------

    def add_review(self, task_id: str, verdict: Verdict | str, reason: str | None = None) -> Review:
        """Record a person's review and move the task by it, in one transaction.

        ``accepted`` → accepted, ``rejected`` → rejected, ``followup`` → queued (a
        new run on the same branch; ``reason`` holds the follow-up instruction).
        Raises :class:`IllegalTransition` when the task's state does not allow it,
        recording nothing.
        """
        verdict = Verdict(verdict)
        now = time.time()
        with self._write() as connection:
            current = TaskState(task_row(connection, task_id)["state"])
            move_state(connection, task_id, current, _VERDICT_STATE[verdict])
            last_run = connection.execute(
                sa.select(runs.c.id).where(runs.c.task_id == task_id).order_by(runs.c.attempt.desc()).limit(1)
            ).scalar()
            row = {"task_id": task_id, "run_id": last_run, "verdict": verdict.value, "reason": reason, "time": now}
            inserted = connection.execute(reviews.insert().values(row))
            key = inserted.inserted_primary_key
            assert key is not None
            return _review({"id": key[0], **row})

    def reviews(self, task_id: str) -> list[Review]:
        query = sa.select(reviews).where(reviews.c.task_id == task_id).order_by(reviews.c.id)
        with self._read() as connection:
            return [_review(row) for row in connection.execute(query).mappings()]

    # -- recovery --------------------------------------------------------------

    def recover_interrupted(self, worker: str | None = None, *, max_interruptions: int = 1) -> list[Recovery]:
        """Settle the runs a dead worker left ``running``; call it when a worker (re)starts.

        The rule: each such run is marked ``interrupted`` (ended now, every event
        it wrote kept). If its task is still active (preparing, running or
        needs_input) the task is requeued — unless its last ``max_interruptions + 1``
        rounds were all interrupted, in which case it is failed: a task that keeps
        killing its worker is likelier the cause than the victim. A round that ends
        any other way resets the count, and the parallel attempts of one round count
        once. With the default, a task is requeued after its first interruption and
        failed after a second in a row. A task that already left the active states
        (cancelled meanwhile, say) keeps its state.

        ``worker`` limits recovery to that worker's runs; ``None`` takes every
        running run, which is right only when no other worker is alive (the
        single-machine engine at start-up). Then an active task with no running
        run at all (its worker died between claiming it and starting a run) is
        requeued too, with its ``recovered`` event, or failed once that happened
        :data:`MAX_LOST_BEFORE_A_RUN` times in a row.
        """
        query = sa.select(runs.c.id).where(runs.c.state == RunState.RUNNING.value).order_by(runs.c.started_at)
        if worker is not None:
            query = query.where(runs.c.worker == worker)
        recoveries = self._recover_runs(query, max_interruptions)
        if worker is None:
            recoveries += self._requeue_runless()
        return recoveries

    def interrupt_runs(self, run_ids: Sequence[str], *, max_interruptions: int = 1) -> list[Recovery]:
        """Settle, by the rule of :meth:`recover_interrupted`, the runs of one round whose worker
        an engine found dead (a durable engine, by its heartbeats)."""
        query = sa.select(runs.c.id).where(runs.c.id.in_(list(run_ids)), runs.c.state == RunState.RUNNING.value)
        return self._recover_runs(query.order_by(runs.c.started_at), max_interruptions)

    def running_runs(self) -> list[Run]:
        """Every run marked ``running``, oldest first: what a reconciler checks for a live holder."""
        query = sa.select(runs).where(runs.c.state == RunState.RUNNING.value).order_by(runs.c.started_at)
        with self._read() as connection:
            return [_run(row) for row in connection.execute(query).mappings()]

    def claimer(self, task_id: str) -> str | None:
        """The worker that claimed the task's current round (None: never claimed, or before 0005)."""
        with self._read() as connection:
            return task_row(connection, task_id)["claimed_by"]  # type: ignore[no-any-return]

    # -- workers' leases ------------------------------------------------------

    def register_worker(self, worker: str, *, home: str, lease: float, pid: int | None = None) -> None:
        """Record ``worker`` (serving ``home``, "<host>:<path>#<id>") as alive for ``lease`` seconds."""
        now = time.time()
        row = {"id": worker, "home": home, "pid": os.getpid() if pid is None else pid, "started_at": now,
               "heartbeat_at": now, "expires_at": now + lease}
        with self._write() as connection:
            connection.execute(workers.delete().where(workers.c.id == worker))
            connection.execute(workers.insert().values(row))

    def renew_lease(self, worker: str, lease: float) -> bool:
        """Extend ``worker``'s lease by ``lease`` seconds from now. False when it had lost it:
        another worker judged it dead and recovered its runs, so its rounds must stop."""
        now = time.time()
        with self._write() as connection:
            renewed = connection.execute(workers.update().where(workers.c.id == worker)
                                         .values(heartbeat_at=now, expires_at=now + lease))
            return renewed.rowcount == 1

    def release_worker(self, worker: str) -> None:
        """Forget ``worker``'s lease (it stopped cleanly, having settled its own runs)."""
        with self._write() as connection:
            connection.execute(workers.delete().where(workers.c.id == worker))

    def live_workers(self) -> list[str]:
        """The workers whose leases have not expired, oldest first."""
        query = sa.select(workers.c.id).where(workers.c.expires_at >= time.time()).order_by(workers.c.started_at)
        with self._read() as connection:
            return list(connection.execute(query).scalars())

    def recover_dead_workers(self, worker: str, *, home: str, max_interruptions: int = 1) -> list[Recovery]:
        """Settle what dead workers left, by the rule of :meth:`recover_interrupted`; ``worker``
        (serving ``home``, whose lock it holds) calls it as it starts and then now and again.

        A worker is dead when its lease expired, when it has none (it predates leases, or
        another worker already found it dead), or when it served ``home``: the caller holds
        that home's lock, which its last holder let go of by ending. Dead workers' leases
        are removed first, so one that was only slow finds its lease gone when it next
        renews and stops its rounds, instead of finishing runs that were requeued. Then
        their runs left ``running`` are interrupted, and the tasks they claimed but never
        started a run for are requeued (each with its ``recovered`` event, written here; failed
        instead once that happened :data:`MAX_LOST_BEFORE_A_RUN` times in a row).
        """
        now = time.time()
        with self._write() as connection:
            connection.execute(workers.delete().where(
                workers.c.id != worker, sa.or_(workers.c.expires_at < now, workers.c.home == home)))
        alive = sa.select(workers.c.id)
        query = (sa.select(runs.c.id).where(runs.c.state == RunState.RUNNING.value, runs.c.worker.not_in(alive))
                 .order_by(runs.c.started_at))
        recoveries = self._recover_runs(query, max_interruptions)
        unclaimed = sa.or_(tasks.c.claimed_by.is_(None), tasks.c.claimed_by.not_in(alive))
        return recoveries + self._requeue_runless(unclaimed)

    def requeue_unheld(self, worker: str, held: Collection[str], *, reason: str, rule: str) -> list[Recovery]:
        """Queue again the active tasks ``worker`` claimed that it holds no round of (not in ``held``)
        and that have no run running, each with a ``recovered`` event that gives ``reason`` and
        ``rule``: the store went away between its claim and its round's first run, or while the
        round ended, so nothing will move them on and, the worker being alive, no recovery of dead
        workers will either. A task already queued again so :data:`MAX_LOST_BEFORE_A_RUN` times in a
        row, no run of it begun between, is failed instead, its ``failed`` event giving the count and
        ``reason``: its round is lost each time, and would be for ever.

        Each task is looked at again under its row's lock, in the transaction that moves it and
        writes its event: between the first look and the move another worker may have taken it over
        (this one's lease lost), claimed it and begun its runs."""
        running = sa.select(runs.c.id).where(runs.c.state == RunState.RUNNING.value)
        query = sa.select(tasks.c.id).where(tasks.c.state.in_([state.value for state in ACTIVE]),
                                            tasks.c.claimed_by == worker, tasks.c.id.not_in(list(held)),
                                            tasks.c.id.not_in(running.with_only_columns(runs.c.task_id)))
        with self._read() as connection:
            candidates = list(connection.execute(query).scalars())
        requeued = []
        for task_id in candidates:
            with self._write() as connection:
                row = task_row(connection, task_id, lock=True)
                state = TaskState(row["state"])
                if state not in ACTIVE or row["claimed_by"] != worker or connection.execute(
                        running.where(runs.c.task_id == task_id).limit(1)).first() is not None:
                    continue  # moved on, or taken over, since the first look
                recovery = requeue_lost(connection, task_id, state, reason=reason, rule=rule)
            requeued.append(recovery)
        return requeued

    def _recover_runs(self, query: sa.Select[Any], max_interruptions: int) -> list[Recovery]:
        """Interrupt the runs ``query`` names, each in a transaction of its own."""
        with self._read() as connection:
            run_ids = list(connection.execute(query).scalars())
        recoveries = []
        for run_id in run_ids:
            with self._write() as connection:
                recovery = _recover(connection, run_id, max_interruptions)
            if recovery is not None:
                recoveries.append(recovery)
        return recoveries

    def requeue_lost(self, task_id: str, expected: TaskState, *, reason: str, rule: str) -> Recovery | None:
        """Queue again the task, seen ``expected``, whose round was lost before a run of it began
        (or fail it, by :func:`requeue_lost`'s bound), with its event; None, changing nothing, if it
        is no longer ``expected`` or a run of it is running: it moved on, or a start began runs."""
        running = sa.select(runs.c.id).where(runs.c.task_id == task_id, runs.c.state == RunState.RUNNING.value)
        with self._write() as connection:
            if task_row(connection, task_id, lock=True)["state"] != expected.value \
                    or connection.execute(running.limit(1)).first() is not None:
                return None
            return requeue_lost(connection, task_id, expected, reason=reason, rule=rule)

    def _requeue_runless(self, *conditions: sa.ColumnElement[bool]) -> list[Recovery]:
        """Queue again the active tasks with no run running that ``conditions`` name (their worker is
        gone), by :func:`requeue_lost`, each with its event."""
        running = sa.select(runs.c.task_id).where(runs.c.state == RunState.RUNNING.value)
        query = sa.select(tasks.c.id, tasks.c.state, tasks.c.claimed_by).where(
            tasks.c.state.in_([state.value for state in ACTIVE]), tasks.c.id.not_in(running), *conditions)
        with self._read() as connection:
            orphans = connection.execute(query).all()
        recoveries = []
        running_of = sa.select(runs.c.id).where(runs.c.state == RunState.RUNNING.value)
        for task_id, state, claimer in orphans:
            reason = f"its worker{f' {claimer}' if claimer else ''} ended with no run of it running"
            with self._write() as connection:
                row = task_row(connection, task_id, lock=True)
                if (row["state"], row["claimed_by"]) != (state, claimer) or connection.execute(
                        running_of.where(runs.c.task_id == task_id).limit(1)).first() is not None:
                    continue  # moved on since the look: queued again and claimed by a live worker, say
                if connection.execute(sa.select(tasks.c.id).where(tasks.c.id == task_id, *conditions)).first() is None:
                    continue  # its claimer lives again: it lost its lease, registered again and claimed it anew
                recovery = requeue_lost(connection, task_id, TaskState(state), reason=reason, rule=LOST_RULE)
            recoveries.append(recovery)
        return recoveries


#: How many times in a row a task is queued again after its round was lost before a run of it began
#: before it is failed instead. Such a loss (the store away as the round began, its worker dead
#: first) is no interruption and is not counted as one; but a task whose every round is lost so
#: (its begin fails each time, or kills its worker) would be claimed and lost again at every lease
#: renewal, every 10 s, for ever. Three in a row is past bad luck; a run begun, or a person's
#: `errand retry` or `errand followup`, starts the count again.
MAX_LOST_BEFORE_A_RUN = 3
LOST_RULE = ("queued again; a round lost before a run began is not counted as an interruption, but once queued "
              f"again so {MAX_LOST_BEFORE_A_RUN} times in a row the task is failed")


def requeue_lost(connection: sa.Connection, task_id: str, previous: TaskState, *, reason: str,
                  rule: str) -> Recovery:
    """Queue again the active task (``previous``) whose round was lost before a run of it began, with a
    ``recovered`` event that gives ``reason`` and ``rule``; or, when it was already queued again so
    :data:`MAX_LOST_BEFORE_A_RUN` times in a row, fail it with a ``failed`` event that says why."""
    last_round = connection.execute(
        sa.select(sa.func.coalesce(sa.func.max(runs.c.round), 0)).where(runs.c.task_id == task_id)).scalar_one()
    lost = _lost_before_a_run(connection, task_id, last_round)
    if lost >= MAX_LOST_BEFORE_A_RUN:
        move_state(connection, task_id, previous, TaskState.FAILED)
        insert_event(connection, task_id, None, "failed", {
            "reason": f"queued again {lost} times after its round was lost before a run began; stopping: {reason}",
            "code": "lost_before_a_run"})
        return Recovery(run_id=None, task_id=task_id, previous=previous, state=TaskState.FAILED)
    move_state(connection, task_id, previous, TaskState.QUEUED)
    insert_event(connection, task_id, None, "recovered", Recovered(
        previous.value, TaskState.QUEUED.value, reason, rule, last_round=last_round).to_data())
    return Recovery(run_id=None, task_id=task_id, previous=previous, state=TaskState.QUEUED)


#: What ends a row of rounds lost before a run: the task settled (failed, cancelled), or a person's retry
#: or follow-up of it, a fresh start. Only a person moves a failed or cancelled task on.
_FRESH_START = ("failed", "cancelled", "retried", "followup")


def _lost_before_a_run(connection: sa.Connection, task_id: str, last_round: int) -> int:
    """How many times in a row, newest first, the task was queued again with ``last_round`` its last
    round begun (up to :data:`MAX_LOST_BEFORE_A_RUN`). The task settled, or a person's retry or
    follow-up, ends the row: what comes after is a fresh start."""
    query = (sa.select(events).where(events.c.task_id == task_id, events.c.kind.in_(["recovered", *_FRESH_START]))
             .order_by(events.c.id.desc()).limit(MAX_LOST_BEFORE_A_RUN))
    count = 0
    for row in connection.execute(query).mappings():
        event = Event(**row)
        if event.kind != "recovered" or not Recovered.of(event).lost_before_a_run(last_round):
            break
        count += 1
    return count


def move_state(connection: sa.Connection, task_id: str, current: TaskState, target: TaskState,
          **values: Any) -> None:
    """Compare-and-set the task from ``current`` to ``target``, checked against the lifecycle
    (setting ``values`` too)."""
    try:
        transition(current, target)
    except IllegalTransition as error:
        error.task_id = task_id
        raise
    moved = connection.execute(
        tasks.update().where(tasks.c.id == task_id, tasks.c.state == current.value)
        .values(state=target.value, updated_at=time.time(), **values)
    )
    notify(connection, task_id)
    if moved.rowcount != 1:
        # Only without a write lock held up front (PostgreSQL, read committed) can
        # another writer slip in between the read and this update.
        actual = TaskState(task_row(connection, task_id)["state"])
        raise StateConflict(
            f"task {task_id} changed from {current} to {actual} while moving it to {target}; read it again",
            task_id=task_id, expected=current.value, actual=actual.value,
        )


def _end_run(connection: sa.Connection, run_id: str, state: RunState, result: Any) -> None:
    ended = connection.execute(
        runs.update().where(runs.c.id == run_id, runs.c.state == RunState.RUNNING.value)
        .values(state=state.value, ended_at=time.time(), result=result)
    )
    if ended.rowcount != 1:
        row = _run_row(connection, run_id)
        raise RunNotRunning(
            f"run {run_id} already ended as {row['state']}", task_id=row["task_id"], run_id=run_id
        )


def _recover(connection: sa.Connection, run_id: str, max_interruptions: int) -> Recovery | None:
    try:
        _end_run(connection, run_id, RunState.INTERRUPTED, None)
    except RunNotRunning:
        return None  # it ended (or another recoverer took it) since we looked
    task_id = _run_row(connection, run_id)["task_id"]
    previous = TaskState(task_row(connection, task_id)["state"])
    if previous not in ACTIVE:
        return Recovery(run_id=run_id, task_id=task_id, previous=previous, state=previous)
    gave_up = _interrupted_rounds(connection, task_id, max_interruptions + 1) > max_interruptions
    target = TaskState.FAILED if gave_up else TaskState.QUEUED
    move_state(connection, task_id, previous, target)
    return Recovery(run_id=run_id, task_id=task_id, previous=previous, state=target)


def insert_event(connection: sa.Connection, task_id: str, run_id: str | None, kind: str, data: Any) -> int:
    seq = None
    if run_id is not None:
        seq = connection.execute(
            runs.update().where(runs.c.id == run_id, runs.c.task_id == task_id)
            .values(last_seq=runs.c.last_seq + 1).returning(runs.c.last_seq)
        ).scalar()
        if seq is None:
            raise RunNotFound(f"task {task_id} has no run {run_id}", task_id=task_id, run_id=run_id)
    if not _in_commit_order(connection, task_id, kind):
        raise TaskNotFound(f"no task has id {task_id!r}; `errand ls` lists them", task_id=task_id)
    inserted = connection.execute(
        events.insert().values(task_id=task_id, run_id=run_id, seq=seq, time=time.time(), kind=kind,
                               data={} if data is None else data)
    )
    event_id = inserted.inserted_primary_key
    assert event_id is not None
    # Listeners were told (on commit) by _in_commit_order's statement: PostgreSQL's; SQLite has no channel.
    return int(event_id[0])


#: The PostgreSQL advisory lock spaces (two 32-bit keys) events are written in: one task's, and the forwarded kinds'.
_TASK_EVENTS, _FORWARDED_EVENTS = 0x65727200, 0x65727201
#: How long a transaction that holds those locks may sit idle before PostgreSQL ends it, milliseconds.
IDLE_HOLDER_MS = 60_000
# _in_commit_order's statement. The task's row is locked FOR KEY SHARE in a CTE, which PostgreSQL
# evaluates (LockRows) before the outer select computes a column of that row: the advisory locks are
# asked for only once the row is held. In one select, with FOR KEY SHARE, they would be asked for
# below the LockRows, before the row (tests/tasks/test_event_order.py holds the order). A select's
# columns are computed in their order: the task's lock before the forwarded kinds'. A missing task
# gives no row, and takes no lock. The server's idle bound is read with current_setting (ms, s, min, h,
# d: each an interval's unit), not from pg_settings, which builds every setting's row at each call.
_LOCKS = """WITH task AS MATERIALIZED (SELECT id FROM tasks WHERE id = :task FOR KEY SHARE)
SELECT set_config('idle_in_transaction_session_timeout', least(nullif(
           (extract(epoch FROM current_setting('idle_in_transaction_session_timeout')::interval) * 1000)::bigint, 0),
           :idle)::text, true),
       pg_advisory_xact_lock(:space, hashtext(:task)){forwarded},
       pg_notify(:channel, :task), txid_current(), pg_backend_pid()
FROM task"""
_TASK_LOCKS = sa.text(_LOCKS.format(forwarded=""))
_FORWARDED_LOCKS = sa.text(_LOCKS.format(forwarded=", pg_advisory_xact_lock(:forwarded, 0)"))


def _in_commit_order(connection: sa.Connection, task_id: str, kind: str) -> bool:
    """Make the event about to be inserted commit before any event with a higher id that its readers
    read; False if the task is not there.

    Readers keep the last event id they read: a live feed and the local engine per task, the
    Temporal dispatcher across every task for the forwarded kinds. On PostgreSQL an id comes
    from a sequence at insert and transactions commit in any order, so a reader could read id
    n + 1 and never see n, committed a moment later. A lock held from here to the end of the
    transaction makes the writers of one task's events take turns, and those of forwarded
    kinds across tasks. Nothing waits on another lock while holding it, so no deadlock can form:
    an insert ends what a transaction writes, and the row the insert's foreign key locks (the
    task's, FOR KEY SHARE) is locked first, by the same statement, so a writer holding it FOR
    UPDATE (requeue_unbegun) is waited for before the lock is taken. A holder whose process stops
    answering (frozen, its machine gone) is ended by the database once idle for
    :data:`IDLE_HOLDER_MS` (or the server's own bound, if shorter), so the others wait that long at
    most. The statement also says the task changed (on commit) and the transaction's id, which
    its store then need not ask before committing. SQLite has one writer at a time already.

    Every round trip from here to the commit lengthens the others' wait, so this is one statement."""
    if connection.dialect.name != "postgresql":
        return connection.execute(sa.select(tasks.c.id).where(tasks.c.id == task_id)).first() is not None
    forwarded = kind in FORWARDED_KINDS
    row = connection.execute(_FORWARDED_LOCKS if forwarded else _TASK_LOCKS, {
        "task": task_id, "idle": IDLE_HOLDER_MS, "space": _TASK_EVENTS, "channel": CHANNEL,
        **({"forwarded": _FORWARDED_EVENTS} if forwarded else {})}).first()
    if row is None:
        return False
    written_as(connection, row[-2], row[-1])
    return True


def _interrupted_rounds(connection: sa.Connection, task_id: str, limit: int) -> int:
    """How many of the task's last ``limit`` rounds, newest first, in a row, were interrupted.

    A round is interrupted when one of its runs was: parallel attempts die together
    with their worker, and count as one interruption, not N.
    """
    rounds = connection.execute(
        sa.select(runs.c.round, sa.func.max(sa.case((runs.c.state == RunState.INTERRUPTED.value, 1), else_=0)))
        .where(runs.c.task_id == task_id).group_by(runs.c.round).order_by(runs.c.round.desc()).limit(limit)
    ).all()
    count = 0
    for _round, interrupted in rounds:
        if not interrupted:
            break
        count += 1
    return count


_QUEUED = tasks.c.state == TaskState.QUEUED.value


def next_queued() -> sa.Select[str]:
    """The oldest queued task's id, its row locked as it is read where the database can (PostgreSQL's
    ``FOR UPDATE SKIP LOCKED``: racing claimers take different tasks)."""
    return (sa.select(tasks.c.id).where(_QUEUED).order_by(tasks.c.updated_at, tasks.c.id).limit(1)
            .with_for_update(skip_locked=True))


def task_row(connection: sa.Connection, task_id: str, *, lock: bool = False) -> Mapping[Any, Any]:
    """The task's row; with ``lock``, locked until the transaction ends (PostgreSQL: SQLite's write lock is held)."""
    query = sa.select(tasks).where(tasks.c.id == task_id)
    row = connection.execute(query.with_for_update() if lock else query).mappings().first()
    if row is None:
        raise TaskNotFound(f"no task has id {task_id!r}; `errand ls` lists them", task_id=task_id)
    return row


def _run_row(connection: sa.Connection, run_id: str) -> Mapping[Any, Any]:
    row = connection.execute(sa.select(runs).where(runs.c.id == run_id)).mappings().first()
    if row is None:
        raise RunNotFound(f"no run has id {run_id!r}", run_id=run_id)
    return row


def _new_task_id(connection: sa.Connection) -> str:
    # 32 random bits keep ids short to type; the check makes a collision a retry, not an error.
    while True:
        task_id = f"t-{secrets.token_hex(4)}"
        if connection.execute(sa.select(tasks.c.id).where(tasks.c.id == task_id)).first() is None:
            return task_id


def task_record(row: Mapping[Any, Any]) -> Task:
    endpoint = row["model_endpoint"]
    fields = {key: value for key, value in row.items() if key not in ("claimed_by", "claim")}
    return Task(**{**fields, "state": TaskState(row["state"]),
                   "model_endpoint": ModelEndpoint.from_json(endpoint) if endpoint is not None else None})


def _run(row: Mapping[Any, Any]) -> Run:
    fields = {key: value for key, value in row.items() if key != "last_seq"}
    return Run(**{**fields, "state": RunState(row["state"])})


def _review(row: Mapping[Any, Any]) -> Review:
    return Review(**{**row, "verdict": Verdict(row["verdict"])})
