"""The outbox a Temporal round is written into before it is sent (without a Temporal service):
each claim's round stays there, with its tries and last error, until it is acknowledged."""

from __future__ import annotations

from errand.tasks.engines.temporal.outbox import Outbox
from errand.tasks.lifecycle import TaskState
from errand.tasks.store.tasks import TaskStore


def _task(store: TaskStore) -> str:
    return store.create_task(title="t", instruction="i", repo="/r").id


def test_a_claim_writes_its_round_into_the_outbox_until_acknowledged(store: TaskStore) -> None:
    outbox = Outbox(store)
    first, second = _task(store), _task(store)
    claimed = outbox.claim("temporal:serve")
    assert claimed is not None
    task, dispatch = claimed
    assert task.id == first and task.state is TaskState.PREPARING and dispatch.task_id == first
    assert outbox.pending() == [dispatch]
    outbox.unanswered(dispatch, RuntimeError("tcp connect error"))
    [waiting] = outbox.pending()
    assert waiting.tries == 1 and waiting.last_error == "tcp connect error"
    outbox.acknowledged(dispatch)
    assert outbox.pending() == []
    again = outbox.add(first)  # a round found lost after a restart is written again, with a new key
    assert again.id != dispatch.id and [d.task_id for d in outbox.pending()] == [first]
    claimed_next = outbox.claim("temporal:serve")
    assert claimed_next is not None and claimed_next[0].id == second
    assert outbox.claim("temporal:serve") is None
