"""What the store holds as values: a run's ranked result stored as JSON in the shape the engines
always wrote (and read back from older, sparser rows), and what a run says of its own end."""

from __future__ import annotations

from typing import Any

import pytest

from errand.tasks.records import Run, RunResult, RunState

RESULT = RunResult(status="completed", detail=None, rank=1, patch="diff --git a/x b/x\n", summary="Fixed it",
                   assumptions=["tabs"], budget=None, evidence={"files": ["x"], "tests": {"passed": 3}},
                   spent={"tokens": 120}, caches={"setup": "hit"})


def run(state: RunState, result: Any) -> Run:
    return Run("t-1-r1", "t-1", 1, 1, state, "w", 1.0, 2.0, result)


def test_a_result_round_trips_through_its_json() -> None:
    stored = RESULT.to_json()
    assert RunResult.from_json(stored) == RESULT
    assert set(stored) == {"status", "detail", "summary", "assumptions", "budget", "rank", "patch", "evidence",
                           "spent", "caches"}


def test_an_older_sparser_row_reads_with_defaults() -> None:
    old = RunResult.from_json({"status": "completed", "rank": "2", "patch": None, "evidence": None})
    assert (old.rank, old.patch, old.summary, old.assumptions, old.evidence, old.changed) == (2, "", None, [], {},
                                                                                               False)


@pytest.mark.parametrize(("data", "stored"), [(RESULT.to_json(), True), ({"rank": 0}, True),
                                              ({"reason": "setup failed"}, False), (None, False),
                                              ("rank", False), ([("rank", 1)], False)])
def test_only_a_ranked_result_is_a_result(data: Any, stored: bool) -> None:
    assert RunResult.stored(data) is stored


def test_a_result_changed_something_when_its_evidence_lists_files() -> None:
    assert RESULT.changed
    assert not RunResult("answered", None, 1, evidence={"files": []}).changed


def test_a_run_has_an_outcome_only_once_its_round_was_ranked() -> None:
    assert run(RunState.SUCCEEDED, RESULT.to_json()).outcome == RESULT
    assert run(RunState.FAILED, {"reason": "the model was unreachable"}).outcome is None
    assert run(RunState.RUNNING, None).outcome is None
    assert run(RunState.INTERRUPTED, None).interrupted and not run(RunState.CANCELLED, None).interrupted
