"""The API's request bodies refuse what errand could not store or hand to git (NUL, lone
surrogates, overlong fields, out-of-range numbers) before anything runs; a run is shown without
its patch, which has an endpoint of its own."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from errand.errors import ConfigError
from errand.server.schemas import AcceptIn, CommentIn, FollowupIn, TaskIn, without_patch
from errand.tasks.records import Run, RunState


def test_a_task_takes_its_defaults() -> None:
    task = TaskIn.model_validate({"instruction": "Fix the tests", "repo": "/srv/calc"})
    assert (task.base, task.attempts, task.model, task.agent, task.title) == ("HEAD", 1, None, None, None)


@pytest.mark.parametrize("given", [
    {"instruction": "nul\x00here"},
    {"instruction": "lone \ud800 surrogate"},
    {"repo": "r" * 4097},
    {"base": "main\x00"},
    {"attempts": 0},
    {"attempts": 9},
])
def test_a_task_errand_cannot_store_is_refused(given: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        TaskIn.model_validate({"instruction": "Fix", "repo": "/srv/calc", **given})


def comment_in(body: dict[str, Any]) -> CommentIn:
    return CommentIn.model_validate(body)


def test_a_comment_ends_on_its_first_line_unless_told_and_is_checked_for_shape() -> None:
    comment = comment_in({"path": "src/app.py", "start_line": 3, "body": "Off by one"}).comment()
    assert (comment.path, comment.start_line, comment.end_line, comment.side) == ("src/app.py", 3, 3, "new")
    ranged = comment_in({"path": "a.py", "side": "old", "start_line": 2, "end_line": 5, "body": "x"}).comment()
    assert (ranged.start_line, ranged.end_line, ranged.side) == (2, 5, "old")
    with pytest.raises(ValidationError):
        comment_in({"path": "a.py", "start_line": 0, "body": "x"})
    with pytest.raises(ValidationError):
        comment_in({"path": "a.py", "side": "both", "start_line": 1, "body": "x"})
    with pytest.raises(ConfigError):
        comment_in({"path": "a.py", "start_line": 5, "end_line": 2, "body": "x"}).comment()


def test_a_followup_names_an_attempt_by_number_only_and_within_the_comment_limit() -> None:
    assert FollowupIn.model_validate({"text": "again"}).attempt is None
    assert FollowupIn.model_validate({"attempt": 2}).attempt == 2
    for attempt in (True, "2", 0):
        with pytest.raises(ValidationError):
            FollowupIn.model_validate({"attempt": attempt})
    with pytest.raises(ValidationError):
        FollowupIn.model_validate({"comments": [{"path": "a.py", "start_line": 1, "body": "x"}] * 51})


def test_accept_asks_no_confirmation_unless_told() -> None:
    assert AcceptIn.model_validate({}).confirm is False and AcceptIn.model_validate({"attempt": 2}).attempt == 2
    with pytest.raises(ValidationError):
        AcceptIn.model_validate({"attempt": 0})


def test_a_run_is_shown_without_its_patch() -> None:
    run = Run("r-1", "t-1", 1, 1, RunState.SUCCEEDED, "w", 1.0, 2.0, {"patch": "diff --git", "summary": "done"})
    assert without_patch(run).result == {"summary": "done"}
    assert run.result["patch"] == "diff --git"  # the run itself is left as it was
    pending = Run("r-2", "t-1", 2, 1, RunState.RUNNING, "w", 1.0, None, None)
    assert without_patch(pending) is pending
