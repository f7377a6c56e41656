"""The ways a run ends: each exception carries its exit status and what the result needs."""

from __future__ import annotations

import pytest

from errand.agent.exits import BudgetExhausted, Finished, NeedsInput, RunEnded, RunFailed, Stuck
from errand.errors import ErrandError


def test_each_end_carries_its_status_and_its_detail() -> None:
    ends: list[tuple[RunEnded, str]] = [
        (Finished("fixed add()", ["numbers only"]), "finished"), (NeedsInput("which sign?", "c-7"), "needs_input"),
        (BudgetExhausted("step budget used up", "steps"), "budget_exhausted"),
        (Stuck("the same call 3 times"), "stuck"), (RunFailed("the model failed"), "error"),
        (RunEnded("ended"), "error"),
    ]
    for end, status in ends:
        assert end.status == status
        assert end.detail == str(end) != ""


def test_what_each_end_carries_for_the_result() -> None:
    finished = Finished("fixed add()", ["numbers only"], answer="42")
    assert (finished.summary, finished.assumptions, finished.answer) == ("fixed add()", ["numbers only"], "42")
    assert Finished("done", []).answer is None
    asked = NeedsInput("which sign?", "c-7")
    assert (asked.question, asked.call_id) == ("which sign?", "c-7")
    assert BudgetExhausted("time budget used up", "seconds").budget == "seconds"


def test_an_end_is_control_flow_not_an_errand_error() -> None:
    # A handler that catches ErrandError (a tool's failure becomes an answer) must let a run's end through.
    with pytest.raises(RunEnded):
        try:
            raise Stuck("looping")
        except ErrandError:  # pragma: no cover - the point is that this is not taken
            pytest.fail("a run's end was caught as an errand error")
    assert not issubclass(RunEnded, ErrandError)
