"""Waiting for a round to be wholly over, as seen through the HTTP API: a task moves to
``ready_for_review`` before its round's distillation ends, and the distillation's event comes
after, so a test that counts events to show that nothing changed must wait for it first."""

from __future__ import annotations

import time
from typing import Any

import httpx

from .conftest import wait_state

#: The events that end a round's distillation.
DISTILLED = ("memories_proposed", "distill_skipped", "distill_failed")


def settled(client: httpx.Client, task_id: str, seconds: float = 120) -> None:
    """Wait for the task to be ready for review and each of its rounds' distillation to have ended."""
    wait_state(client, task_id, "ready_for_review")
    deadline = time.monotonic() + seconds
    while True:
        kinds = [e["kind"] for e in client.get(f"/api/tasks/{task_id}/events", params={"limit": 1000}).json()]
        if sum(kind in DISTILLED for kind in kinds) >= kinds.count("ready_for_review"):
            return
        assert time.monotonic() < deadline, f"the round's distillation never ended: {kinds[-8:]}"
        time.sleep(0.1)


def unchanged(client: httpx.Client, task_id: str) -> tuple[Any, ...]:
    """The task's state and how many reviews and events it has, once its round is over."""
    settled(client, task_id)
    task = client.get(f"/api/tasks/{task_id}").json()
    events = client.get(f"/api/tasks/{task_id}/events", params={"limit": 1000}).json()
    return task["state"], len(task["reviews"]), len(events)
