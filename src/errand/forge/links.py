"""Which task belongs to which issue and pull request, which webhook deliveries were handled,
and the forge's own bookkeeping of a task: what it asked of a round, the question it posted,
the CI fixes it started. The forge decides from these rows, never from the task's event log
(what a person should read there, :mod:`errand.forge.timeline` writes)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import sqlalchemy as sa

from errand.database import SqlStore
from errand.forge.schema import ci_fixes, deliveries, links, questions, rounds

__all__ = ["Link", "LinkStore", "PostedQuestion", "Round"]


@dataclass(frozen=True)
class Link:
    task_id: str
    forge: str
    base_url: str
    repo: str
    issue: int | None = None
    requested_by: str | None = None
    comment_id: int | None = None
    pull: int | None = None
    pull_url: str | None = None
    pull_branch: str | None = None
    pushed: str | None = None
    batch: str | None = None


@dataclass(frozen=True)
class Round:
    """What the forge asked of a round it started on pull request ``pull`` (a review comment, a
    red CI, a fork's pull request): where it starts, whose line comments hear back, where its
    commit goes (``push_repo``: a fork that lets maintainers push; None: the repository), and
    ``fork_pull``, a fork's pull request errand may not push to (its commit gets a pull request of its own)."""

    task_id: str
    pull: int
    branch: str
    head: str
    requested_by: str | None = None
    threads: tuple[int, ...] = ()
    ci: bool = False
    fork: str | None = None
    push_repo: str | None = None
    fork_pull: int | None = None


@dataclass(frozen=True)
class PostedQuestion:
    """The question (``question``: its event's id) errand posted on issue or pull request
    ``number``, as comment ``comment_id``."""

    task_id: str
    question: int
    number: int
    comment_id: int | None


class LinkStore(SqlStore):
    """On the task store's database (pass its engine)."""

    def add(self, link: Link) -> Link:
        with self._write() as connection:
            connection.execute(links.insert().values(**link.__dict__, created_at=time.time()))
        return link

    def get(self, task_id: str) -> Link | None:
        with self._read() as connection:
            row = connection.execute(sa.select(links).where(links.c.task_id == task_id)).mappings().first()
        return _link(row) if row is not None else None

    def for_pull(self, repo: str, pull: int) -> Link | None:
        """The newest task whose work goes to pull request ``pull`` of ``repo``."""
        query = (sa.select(links).where(links.c.repo == repo, links.c.pull == pull)
                 .order_by(links.c.created_at.desc()).limit(1))
        with self._read() as connection:
            row = connection.execute(query).mappings().first()
        return _link(row) if row is not None else None

    def all_for_pull(self, repo: str, pull: int) -> list[Link]:
        query = sa.select(links).where(links.c.repo == repo, links.c.pull == pull).order_by(links.c.created_at)
        with self._read() as connection:
            return [_link(row) for row in connection.execute(query).mappings()]

    def for_issue(self, repo: str, issue: int) -> list[Link]:
        query = sa.select(links).where(links.c.repo == repo, links.c.issue == issue).order_by(links.c.created_at)
        with self._read() as connection:
            return [_link(row) for row in connection.execute(query).mappings()]

    def listed(self, *, repo: str | None = None, batch: str | None = None, limit: int = 100) -> list[Link]:
        """Links newest first, of one repository or one batch."""
        query = sa.select(links).order_by(links.c.created_at.desc()).limit(limit)
        if repo is not None:
            query = query.where(links.c.repo == repo)
        if batch is not None:
            query = query.where(links.c.batch == batch)
        with self._read() as connection:
            return [_link(row) for row in connection.execute(query).mappings()]

    def batches(self, limit: int = 100) -> list[tuple[str, int, float]]:
        """Backlog batches newest first: each one's id, how many tasks it started, and when."""
        query = (sa.select(links.c.batch, sa.func.count(), sa.func.min(links.c.created_at).label("started"))
                 .where(links.c.batch.is_not(None)).group_by(links.c.batch)
                 .order_by(sa.desc("started")).limit(limit))
        with self._read() as connection:
            return [(str(batch), int(count), float(started)) for batch, count, started in connection.execute(query)]

    def pending(self) -> list[Link]:
        """Links whose pull request is not open yet, or whose round is not pushed yet."""
        query = sa.select(links).where(sa.or_(links.c.pull.is_(None), links.c.pushed.is_(None)))
        with self._read() as connection:
            return [_link(row) for row in connection.execute(query.order_by(links.c.created_at)).mappings()]

    def pushed_pulls(self) -> list[Link]:
        """Links whose work is on a pull request: the ones whose CI errand reads back."""
        query = sa.select(links).where(links.c.pull.is_not(None), links.c.pushed.is_not(None))
        with self._read() as connection:
            return [_link(row) for row in connection.execute(query.order_by(links.c.created_at)).mappings()]

    def update(self, task_id: str, **values: object) -> Link:
        with self._write() as connection:
            connection.execute(links.update().where(links.c.task_id == task_id).values(**values))
        found = self.get(task_id)
        assert found is not None
        return found

    def first_delivery(self, delivery_id: str, event: str) -> bool:
        """Record a delivery; False when it was recorded already (the forge redelivered it)."""
        try:
            with self._write() as connection:
                connection.execute(deliveries.insert().values(id=delivery_id, event=event, received_at=time.time()))
        except sa.exc.IntegrityError:
            return False
        return True

    def delivered(self, delivery_id: str, outcome: str) -> None:
        with self._write() as connection:
            connection.execute(deliveries.update().where(deliveries.c.id == delivery_id).values(outcome=outcome))

    def outcome(self, delivery_id: str) -> str | None:
        with self._read() as connection:
            return connection.execute(sa.select(deliveries.c.outcome).where(deliveries.c.id == delivery_id)).scalar()


    # ------------------------------------------------------------ the forge's bookkeeping of a task

    def add_round(self, found: Round) -> Round:
        values = {**found.__dict__, "threads": list(found.threads)}
        with self._write() as connection:
            connection.execute(rounds.insert().values(**values, created_at=time.time()))
        return found

    def round(self, task_id: str) -> Round | None:
        """What the forge asked of ``task_id``'s round, if the forge started it on a pull request."""
        with self._read() as connection:
            row = connection.execute(sa.select(rounds).where(rounds.c.task_id == task_id)).mappings().first()
        return _round(row) if row is not None else None

    def errand_pull_for(self, repo: str, fork_pull: int) -> Link | None:
        """The newest link in ``repo`` whose round was asked on fork pull request ``fork_pull`` and
        that has a pull request of errand's own."""
        query = (sa.select(links).join(rounds, rounds.c.task_id == links.c.task_id)
                 .where(links.c.repo == repo, rounds.c.fork_pull == fork_pull, links.c.pull.is_not(None),
                        links.c.pull_branch.is_not(None))
                 .order_by(links.c.created_at.desc()).limit(1))
        with self._read() as connection:
            row = connection.execute(query).mappings().first()
        return _link(row) if row is not None else None

    def posted(self, task_id: str) -> PostedQuestion | None:
        """The question of ``task_id`` errand posted last."""
        with self._read() as connection:
            row = connection.execute(sa.select(questions).where(questions.c.task_id == task_id)).mappings().first()
        return PostedQuestion(row["task_id"], row["question"], row["number"], row["comment_id"]) if row else None

    def post(self, posted: PostedQuestion) -> None:
        with self._write() as connection:
            connection.execute(questions.delete().where(questions.c.task_id == posted.task_id))
            connection.execute(questions.insert().values(**posted.__dict__, posted_at=time.time()))

    def fix_asked(self, task_id: str, commit: str) -> bool:
        """Whether a CI-fix round was started for ``task_id``'s pushed ``commit`` already."""
        query = sa.select(ci_fixes.c.fix_task_id).where(ci_fixes.c.task_id == task_id,
                                                        ci_fixes.c.red_commit == commit)
        with self._read() as connection:
            return connection.execute(query).first() is not None

    def ask_fix(self, task_id: str, commit: str, fix_task_id: str) -> None:
        try:
            with self._write() as connection:
                connection.execute(ci_fixes.insert().values(task_id=task_id, red_commit=commit,
                                                            fix_task_id=fix_task_id, asked_at=time.time()))
        except sa.exc.IntegrityError:
            pass  # asked already: the first fix stands


def _round(row: sa.RowMapping) -> Round:
    values = {key: row[key] for key in Round.__dataclass_fields__}
    return Round(**{**values, "threads": tuple(int(t) for t in row["threads"] or ()), "ci": bool(row["ci"])})


def _link(row: sa.RowMapping) -> Link:
    return Link(**{key: row[key] for key in Link.__dataclass_fields__})
