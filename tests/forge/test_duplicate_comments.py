"""Red team for issue 25, through a real ``errand serve`` (FAILS on main): the same comment
delivered under two delivery ids — a repository hook and an organisation hook both configured, or
`connect` run twice — starts two tasks. Only a review is idempotent on its own id; a comment is
idempotent only on the delivery id."""

from __future__ import annotations

import uuid

import httpx
import pytest

from server.conftest import Served

from .conftest import REPO, Forged

pytestmark = [pytest.mark.faults, pytest.mark.slow]


def test_one_comment_is_at_most_one_task_whatever_its_delivery_ids(forged: Forged, served: Served) -> None:
    fake, hook = forged.fake, f"{served.url}/api/forge/github/webhook"
    number = fake.add_issue(REPO, "add() subtracts", "add(2, 3) gives -1")["number"]
    asked = fake.add_comment(REPO, number, "@errand fix this please", user="acme")
    payload = fake.issue_payload(REPO, number, "created", comment=asked)
    outcomes = [fake.deliver(hook, "issue_comment", payload, delivery=str(uuid.uuid4())) for _ in range(2)]
    assert all(o.status_code in (200, 202) for o in outcomes), [o.text for o in outcomes]
    tasks = httpx.get(f"{served.url}/api/tasks", timeout=30).json()["tasks"]
    assert len(tasks) == 1, ([o.json() for o in outcomes], tasks)
