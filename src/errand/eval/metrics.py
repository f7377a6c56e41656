"""The figures of an evaluation: resolved, pass@k and pass^k, failure reasons, calibration.

* **pass@k** — the chance that at least one of k attempts resolves an instance, by Chen
  et al.'s unbiased estimator from n ≥ k attempts of which c resolved:
  ``1 - C(n-c, k) / C(n, k)``, averaged over instances.
* **pass^k** — the chance that all k attempts resolve it (τ-bench's reliability figure):
  ``C(c, k) / C(n, k)``, averaged over instances.
* **calibration** — errand's confidence level for each attempt against whether the
  grader resolved it: how often "high" was right.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from math import comb
from typing import Any

from errand.eval.grading import Grade

__all__ = ["Attempt", "calibration", "pass_at_k", "pass_hat_k", "summarize"]

LEVELS = ("high", "medium", "low")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Chen et al.'s unbiased pass@k for one instance: n attempts, c resolved."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, not n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """pass^k for one instance: the chance that k attempts drawn from the n all resolved."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass^k needs 0 <= c <= n and 1 <= k <= n, not n={n} c={c} k={k}")
    return comb(c, k) / comb(n, k)


@dataclass(frozen=True)
class Attempt:
    """One attempt at an instance: its grade and what producing it cost (zero for given patches)."""

    grade: Grade
    confidence: str | None = None  # errand's level for the agent's result, when an agent made it
    tokens: int = 0
    cost: float = 0.0
    seconds: float = 0.0  # the agent's wall time
    agent_status: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)


def summarize(attempts: Mapping[str, Sequence[Attempt]]) -> dict[str, Any]:
    """The summary of a run: ``attempts`` maps each instance id to its attempts."""
    per_instance = {iid: _instance_summary(items) for iid, items in sorted(attempts.items())}
    n = min((len(items) for items in attempts.values()), default=0)
    figures: dict[str, Any] = {"instances": len(attempts), "attempts_per_instance": n}
    all_attempts = [a for items in attempts.values() for a in items]
    figures["resolved_attempts"] = sum(a.grade.resolved for a in all_attempts)
    figures["resolved_rate"] = _rate(figures["resolved_attempts"], len(all_attempts))
    figures["instances_resolved_by_any"] = sum(1 for s in per_instance.values() if s["resolved"] > 0)
    if n:
        figures["pass_at_k"] = {str(k): _mean([pass_at_k(s["attempts"], s["resolved"], k)
                                                for s in per_instance.values()]) for k in range(1, n + 1)}
        figures["pass_hat_k"] = {str(k): _mean([pass_hat_k(s["attempts"], s["resolved"], k)
                                                 for s in per_instance.values()]) for k in range(1, n + 1)}
    figures["failures"] = _failures(all_attempts)
    figures["flagged_attempts"] = sum(1 for a in all_attempts if a.grade.flags)
    figures["tokens"] = sum(a.tokens for a in all_attempts)
    figures["cost"] = round(sum(a.cost for a in all_attempts), 6)
    figures["calibration"] = calibration(all_attempts)
    figures["per_instance"] = per_instance
    return figures


def _instance_summary(items: Sequence[Attempt]) -> dict[str, Any]:
    return {"attempts": len(items), "resolved": sum(a.grade.resolved for a in items),
            "statuses": [a.grade.status for a in items], "errors": [a.grade.error for a in items],
            "tokens": sum(a.tokens for a in items), "cost": round(sum(a.cost for a in items), 6),
            "agent_seconds": round(sum(a.seconds for a in items), 3),
            "grade_seconds": round(sum(a.grade.seconds.get("total", 0.0) for a in items), 3),
            "confidence": [a.confidence for a in items]}


def _failures(attempts: Sequence[Attempt]) -> dict[str, dict[str, int]]:
    """Why attempts did not resolve, split into the agent's failures and the infrastructure's."""
    split: dict[str, Counter[str]] = {"agent": Counter(), "infrastructure": Counter()}
    for attempt in attempts:
        grade = attempt.grade
        if grade.resolved:
            continue
        kind = grade.failure or "agent"
        reason = grade.error or "unresolved"
        if attempt.agent_status not in (None, "finished") and kind == "agent":
            reason = f"agent {attempt.agent_status}: {reason}"
        split[kind][reason] += 1
    return {kind: dict(sorted(counter.items())) for kind, counter in split.items()}


def calibration(attempts: Sequence[Attempt]) -> list[dict[str, Any]]:
    """Per confidence level: how many attempts had it and how many of those the grader resolved."""
    rows = []
    for level in LEVELS:
        graded = [a.grade.resolved for a in attempts if a.confidence == level]
        rows.append({"confidence": level, "attempts": len(graded), "resolved": sum(graded),
                     "resolved_rate": _rate(sum(graded), len(graded))})
    return rows


def _rate(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


def _mean(values: Sequence[float]) -> float:
    return round(sum(values) / len(values), 6) if values else 0.0
