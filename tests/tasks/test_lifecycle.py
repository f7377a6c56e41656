from __future__ import annotations

import itertools

import pytest

from errand.errors import ErrandError
from errand.tasks.errors import IllegalTransition
from errand.tasks.lifecycle import FINAL, TRANSITIONS, TaskState, allowed, transition

S = TaskState

LEGAL = {
    (S.QUEUED, S.PREPARING), (S.PREPARING, S.RUNNING), (S.RUNNING, S.NEEDS_INPUT), (S.NEEDS_INPUT, S.RUNNING),
    (S.RUNNING, S.READY_FOR_REVIEW), (S.READY_FOR_REVIEW, S.ACCEPTED), (S.READY_FOR_REVIEW, S.REJECTED),
    # a question answered, nothing changed
    (S.RUNNING, S.ANSWERED),
    # follow-up
    (S.READY_FOR_REVIEW, S.QUEUED), (S.REJECTED, S.QUEUED), (S.ANSWERED, S.QUEUED),
    # retry, or a follow-up of a task that ended without a result
    (S.FAILED, S.QUEUED), (S.CANCELLED, S.QUEUED),
    # requeue after an interrupted run
    (S.PREPARING, S.QUEUED), (S.RUNNING, S.QUEUED), (S.NEEDS_INPUT, S.QUEUED),
} | {
    (state, end) for state in TaskState if state not in FINAL for end in (S.FAILED, S.CANCELLED)
}


def test_the_transition_table_is_exactly_the_documented_one() -> None:
    table = {(current, target) for current, targets in TRANSITIONS.items() for target in targets}
    assert table == LEGAL


@pytest.mark.parametrize(("current", "target"), sorted(itertools.product(TaskState, TaskState)))
def test_every_pair(current: TaskState, target: TaskState) -> None:
    if (current, target) in LEGAL:
        assert transition(current, target) is target
        assert allowed(current.value, target.value)
    else:
        with pytest.raises(IllegalTransition) as caught:
            transition(current, target)
        assert isinstance(caught.value, ErrandError)
        assert (caught.value.code, caught.value.current, caught.value.target) == (
            "illegal_transition", current.value, target.value,
        )


def test_accepted_is_the_end_and_the_other_final_states_only_start_again() -> None:
    assert TRANSITIONS[S.ACCEPTED] == frozenset()
    for state in (S.REJECTED, S.FAILED, S.CANCELLED):
        assert TRANSITIONS[state] == frozenset({S.QUEUED})
