"""Two runs compared, paired over the instances both graded: the effect, its bootstrap interval
with a fixed seed, and the instances each run resolved more often."""

from __future__ import annotations

import pytest

from errand.eval.compare import compare
from errand.eval.errors import EvalError
from eval.shapes import attempt


def test_compare_is_paired_over_shared_instances() -> None:
    a = {iid: [attempt(iid, False)] for iid in "abcd"}
    b = {iid: [attempt(iid, iid in "abc")] for iid in "abce"}
    result = compare(a, b)
    assert result["instances"] == 3 and result["only_in_a"] == ["d"] and result["only_in_b"] == ["e"]
    assert result["difference"] == 1.0 and result["b_better"] == ["a", "b", "c"]
    assert result["ci95"] == [1.0, 1.0]
    mixed = compare({iid: [attempt(iid, iid == "a")] for iid in "abcd"},
                    {iid: [attempt(iid, iid in "bc")] for iid in "abcd"})
    low, high = mixed["ci95"]
    assert low < mixed["difference"] < high


def test_the_share_of_each_instance_s_attempts_is_compared_and_the_figure_repeats() -> None:
    a = {"x": [attempt("x", True), attempt("x", False)], "y": [attempt("y", True)], "z": [attempt("z", False)]}
    b = {"x": [attempt("x", True), attempt("x", True)], "y": [attempt("y", True)], "z": []}
    result = compare(a, b)
    assert (result["resolved_a"], result["resolved_b"]) == (0.5, 0.6667)  # (0.5 + 1 + 0) / 3, (1 + 1 + 0) / 3
    assert result["difference"] == 0.1667 and result["b_better"] == ["x"] and result["a_better"] == []
    assert result["ties"] == 2 and result["only_in_a"] == result["only_in_b"] == []
    assert compare(a, b) == result  # the bootstrap's seed is fixed


def test_runs_that_share_no_instance_are_refused() -> None:
    with pytest.raises(EvalError) as caught:
        compare({"x": [attempt("x", True)]}, {"y": [attempt("y", True)]})
    assert caught.value.code == "eval_nothing_shared"
