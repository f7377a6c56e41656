"""The figures of a run: pass@k and pass^k by hand, failures by kind, confidence against outcome."""

from __future__ import annotations

from math import comb

import pytest

from errand.eval.metrics import pass_at_k, pass_hat_k, summarize
from eval.shapes import attempt


def test_pass_at_k_against_hand_computation() -> None:
    # n=5 attempts, c=2 resolved: pass@1 = 2/5; pass@2 = 1 - C(3,2)/C(5,2) = 1 - 3/10.
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4)
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7)
    assert pass_at_k(5, 2, 4) == 1.0  # n - c < k: some draw must hold a resolved one
    assert pass_hat_k(5, 2, 2) == pytest.approx(1 / 10)
    assert pass_hat_k(5, 2, 3) == 0.0
    assert pass_at_k(3, 0, 3) == 0.0
    with pytest.raises(ValueError):
        pass_at_k(2, 1, 3)
    for n in range(1, 7):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert pass_at_k(n, c, k) == pytest.approx(1 - comb(n - c, k) / comb(n, k))


def test_summary_figures_failures_and_calibration() -> None:
    summary = summarize({
        "a": [attempt("a", True, "high"), attempt("a", False, "high", "tests_failed"), attempt("a", True, "medium")],
        "b": [attempt("b", False, "low", "patch_failed"), attempt("b", False, "low", "setup_failed"),
              attempt("b", False, "high", "tests_failed")],
    })
    assert summary["pass_at_k"]["1"] == pytest.approx((2 / 3 + 0) / 2, abs=1e-6)
    assert summary["pass_at_k"]["2"] == pytest.approx((1 + 0) / 2)
    assert summary["pass_hat_k"]["2"] == pytest.approx((1 / 3) / 2, abs=1e-6)
    assert summary["failures"] == {"agent": {"patch_failed": 1, "tests_failed": 2},
                                   "infrastructure": {"setup_failed": 1}}
    high = next(row for row in summary["calibration"] if row["confidence"] == "high")
    assert (high["attempts"], high["resolved"]) == (3, 1)
    assert summary["tokens"] == 60 and summary["cost"] == 3.0
