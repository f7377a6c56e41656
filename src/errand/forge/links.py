"""Which task belongs to which issue and pull request, and which webhook deliveries were handled."""

from __future__ import annotations

import time
from dataclasses import dataclass

import sqlalchemy as sa

from errand.database import SqlStore
from errand.forge.schema import deliveries, links

__all__ = ["Link", "LinkStore"]


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


def _link(row: sa.RowMapping) -> Link:
    return Link(**{key: row[key] for key in Link.__dataclass_fields__})
