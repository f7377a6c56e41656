"""How the comparison ranks a round's attempts: equal attempts are placed by attempt number,
and each one placed behind an equal says which."""

from __future__ import annotations

from errand.server import taskview
from errand.tasks.evidence import Confidence, Evidence, TestRun
from errand.tasks.records import Run, RunResult, RunState
from errand.tasks.round.steps import RANKING_RULE, rank

PATCH = "diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n@@ -1 +1 @@\n-a - b\n+a + b\n"


def evidence(changed: int, level: str = "high") -> Evidence:
    passing = TestRun("pytest", 0, 0.1, "1 passed", passed=1, failed=0)
    return Evidence("finished", "", None, passing, None, [{"path": "calc.py", "status": "modified"}], [], changed, 0,
                    1, [], [], None, Confidence(level, ["tests pass"]))  # type: ignore[arg-type]


def run(attempt: int, place: int, item: Evidence, patch: str = PATCH) -> Run:
    result = RunResult("finished", None, place, patch=patch, evidence=item.to_json())
    return Run(f"r-{attempt}", "t-1", attempt, 1, RunState.SUCCEEDED, "w", 0.0, 1.0, result.to_json())


def test_equal_attempts_are_placed_by_their_number_and_say_so() -> None:
    items = [evidence(2), evidence(2), evidence(2)]
    order = rank(items)
    assert order == [0, 1, 2]
    assert rank(items[::-1]) == [0, 1, 2]  # by place in the round (attempt number), whatever the evidence
    attempts = taskview.compare([run(n + 1, place + 1, items[n]) for place, n in enumerate(order)], items)
    assert [(a.run.attempt, a.tied_with, a.same_as) for a in attempts] == [(1, None, None), (2, 1, 1), (3, 1, 1)]
    assert "placed by attempt number, the lower first" in RANKING_RULE


def test_an_attempt_placed_by_a_measure_ties_with_none() -> None:
    items = [evidence(5), evidence(2), evidence(2, "low")]
    order = rank(items)
    assert order == [1, 0, 2]  # fewer changed lines first; the lower confidence last
    ranked = [run(n + 1, place + 1, items[n], PATCH + str(n)) for place, n in enumerate(order)]
    attempts = taskview.compare(ranked, [items[n] for n in order])
    assert [(a.run.attempt, a.tied_with) for a in attempts] == [(2, None), (1, None), (3, None)]


def test_a_three_way_tie_names_every_tied_attempt() -> None:
    items = [evidence(2), evidence(2), evidence(2), evidence(9)]
    order = rank(items)
    attempts = taskview.compare([run(n + 1, place + 1, items[n], PATCH + str(n)) for place, n in enumerate(order)],
                                [items[n] for n in order])
    assert taskview.ties(attempts) == [
        "Attempts 1, 2 and 3 are equal on every measure: they are placed by their numbers, the lower first "
        "(1, then 2, then 3)."]
    assert taskview.ties(attempts[:2]) == [
        "Attempts 1 and 2 are equal on every measure: attempt 1 is placed first because its number is lower."]
    assert taskview.ties(attempts[3:]) == []
