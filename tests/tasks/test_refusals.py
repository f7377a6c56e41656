"""Why a person's action does not fit the task's state, in the person's words, with the command
that does what they likely meant; every state and action has a sentence (none is a KeyError)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from errand.tasks.errors import WrongState
from errand.tasks.lifecycle import TaskState
from errand.tasks.records import Task
from errand.tasks.refusals import landed, refused

ACTIONS = ("accept", "reject", "cancel", "followup", "retry")
TASK = Task("t-7", "Fix", "Fix the tests", "/srv/calc", "main", "a" * 40, None, None, 1, TaskState.QUEUED,
            "errand/t-7-fix", None, 1.0, 2.0)


@pytest.mark.parametrize("state", list(TaskState), ids=str)
@pytest.mark.parametrize("action", ACTIONS)
def test_every_state_and_action_has_a_refusal_naming_the_task_and_its_state(state: TaskState, action: str) -> None:
    error = refused(replace(TASK, state=state), action, commit="c" * 40)
    assert isinstance(error, WrongState)
    assert (error.code, error.task_id, error.state) == ("wrong_state", "t-7", state.value)
    assert error.message.startswith("task t-7 ") and "; " in error.message


@pytest.mark.parametrize(("state", "action", "says"), [
    (TaskState.QUEUED, "accept", "is queued and has no result yet; follow it with `errand logs -f t-7`"),
    (TaskState.NEEDS_INPUT, "followup", "is still running (needs input); send the agent a message with "
                                        "`errand message t-7"),
    (TaskState.ACCEPTED, "accept", "was accepted (commit cccccccccccc on branch errand/t-7-fix); "
                                   "`git switch errand/t-7-fix` takes you to it"),
    (TaskState.ACCEPTED, "reject", "it cannot be rejected: delete the branch to take it back "
                                   "(`git branch -D errand/t-7-fix`)"),
    (TaskState.ANSWERED, "accept", "there is no diff to accept"),
    (TaskState.ANSWERED, "cancel", "nothing of it runs any more"),
    (TaskState.FAILED, "accept", "`errand retry t-7` runs it again"),
    (TaskState.READY_FOR_REVIEW, "retry", "it has a result: `errand followup t-7"),
    (TaskState.READY_FOR_REVIEW, "cancel", "review it with `errand show t-7` and `errand diff t-7`"),
    (TaskState.REJECTED, "accept", "was rejected; `errand followup t-7 \"...\"` asks for another round"),
])
def test_the_refusal_says_what_to_do_instead(state: TaskState, action: str, says: str) -> None:
    assert says in refused(replace(TASK, state=state), action, commit="c" * 40).message


def test_where_accepted_work_landed_even_without_its_commit() -> None:
    assert landed("0123456789abcdef", "errand/t-1") == "commit 0123456789ab on branch errand/t-1"
    assert landed(None, "errand/t-1") == "commit ? on branch errand/t-1"
