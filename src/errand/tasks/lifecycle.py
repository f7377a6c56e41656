"""The task lifecycle: states and the transitions allowed between them.

::

    queued → preparing → running ⇄ needs_input
                            ↓
                     ready_for_review → accepted | rejected
                            | answered                          (no change to review: a report)

    any non-final state → failed | cancelled
    preparing | running | needs_input → queued      (the run was interrupted; requeued)
    ready_for_review | rejected → queued            (follow-up: a new round on the task's branch)
    answered → queued                               (follow-up: ask more, or ask for the change)
    failed | cancelled → queued                     (retry, or a follow-up: a new round, history kept)

Final states are ``accepted``, ``rejected``, ``answered``, ``failed`` and
``cancelled``: no work runs in them, and none starts unless a person asks.
``answered`` is the end of a task that asked a question rather than for a change:
the agent finished with a report and changed no file, so there is nothing to
review or accept, and it did not fail. A follow-up is a
person's answer to work that has *not* landed, so it is allowed from
``ready_for_review`` and ``rejected``; a retry or a follow-up of a ``failed``
or ``cancelled`` task starts a new round of the same task, from where the
failed round started, its earlier rounds and events kept. ``accepted`` is the
one state nothing leaves, because its commit has landed on the branch: more
work on it is a new task (with ``parent_id`` naming this one), so "accepted"
always means exactly what the reviewer accepted.

The edge back to ``queued`` from an active state exists for recovery: a run
whose worker died is marked interrupted and its task requeued (see
:meth:`errand.tasks.store.tasks.TaskStore.recover_interrupted`).
"""

from __future__ import annotations

import enum

from errand.tasks.errors import IllegalTransition

__all__ = ["ACTIVE", "FINAL", "TRANSITIONS", "TaskState", "allowed", "transition"]


class TaskState(enum.StrEnum):
    QUEUED = "queued"
    PREPARING = "preparing"
    RUNNING = "running"
    NEEDS_INPUT = "needs_input"
    READY_FOR_REVIEW = "ready_for_review"
    ANSWERED = "answered"
    ACCEPTED = "accepted"
    REJECTED = "rejected"
    FAILED = "failed"
    CANCELLED = "cancelled"


S = TaskState

#: States in which a run is (or should be) in progress on some worker.
ACTIVE = frozenset({S.PREPARING, S.RUNNING, S.NEEDS_INPUT})
#: States in which nothing runs; only a person's follow-up or retry moves one of them (not ``accepted``) on.
FINAL = frozenset({S.ACCEPTED, S.REJECTED, S.ANSWERED, S.FAILED, S.CANCELLED})

_FORWARD: dict[TaskState, frozenset[TaskState]] = {
    S.QUEUED: frozenset({S.PREPARING}),
    S.PREPARING: frozenset({S.RUNNING, S.QUEUED}),
    S.RUNNING: frozenset({S.NEEDS_INPUT, S.READY_FOR_REVIEW, S.ANSWERED, S.QUEUED}),
    S.NEEDS_INPUT: frozenset({S.RUNNING, S.QUEUED}),
    S.READY_FOR_REVIEW: frozenset({S.ACCEPTED, S.REJECTED, S.QUEUED}),
    S.REJECTED: frozenset({S.QUEUED}),
    S.ANSWERED: frozenset({S.QUEUED}),
    S.FAILED: frozenset({S.QUEUED}),
    S.CANCELLED: frozenset({S.QUEUED}),
}

#: Every allowed ``current → {targets}``; states absent from the keys allow nothing.
TRANSITIONS: dict[TaskState, frozenset[TaskState]] = {
    state: _FORWARD.get(state, frozenset()) | (frozenset() if state in FINAL else frozenset({S.FAILED, S.CANCELLED}))
    for state in TaskState
}


def allowed(current: TaskState | str, target: TaskState | str) -> bool:
    return TaskState(target) in TRANSITIONS[TaskState(current)]


def transition(current: TaskState | str, target: TaskState | str) -> TaskState:
    """Return ``target`` if the lifecycle allows ``current → target``; raise :class:`IllegalTransition` if not."""
    current, target = TaskState(current), TaskState(target)
    if target not in TRANSITIONS[current]:
        possible = ", ".join(sorted(TRANSITIONS[current])) or "nothing (it is final)"
        raise IllegalTransition(
            f"a task cannot move from {current} to {target}; from {current} it can move to {possible}",
            current=current.value, target=target.value,
        )
    return target
