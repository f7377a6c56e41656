"""A paired comparison of two runs over the instances both graded.

Each instance gives a pair: the share of its attempts each run resolved. The
difference of the means is the effect; its uncertainty is a paired bootstrap
(instances resampled with replacement, a fixed seed so the figure repeats) and
the discordant instances — resolved more often by one run than the other — are
counted, as McNemar's test would count them for one attempt each.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from errand.eval.errors import EvalError
from errand.eval.metrics import Attempt
from errand.eval.runs import load_attempts

__all__ = ["compare", "compare_runs"]

RESAMPLES = 2000
SEED = 16


def compare_runs(run_a: Path, run_b: Path) -> dict[str, Any]:
    return compare(load_attempts(run_a), load_attempts(run_b))


def compare(a: Mapping[str, Sequence[Attempt]], b: Mapping[str, Sequence[Attempt]]) -> dict[str, Any]:
    shared = sorted(set(a) & set(b))
    if not shared:
        raise EvalError("the two runs share no instance: nothing to compare", code="eval_nothing_shared")
    pairs = [(_share(a[iid]), _share(b[iid])) for iid in shared]
    differences = [y - x for x, y in pairs]
    low, high = _bootstrap(differences)
    return {
        "instances": len(shared), "only_in_a": sorted(set(a) - set(b)), "only_in_b": sorted(set(b) - set(a)),
        "resolved_a": round(sum(x for x, _ in pairs) / len(pairs), 4),
        "resolved_b": round(sum(y for _, y in pairs) / len(pairs), 4),
        "difference": round(sum(differences) / len(differences), 4),
        "ci95": [round(low, 4), round(high, 4)],
        "b_better": [iid for iid, d in zip(shared, differences, strict=True) if d > 0],
        "a_better": [iid for iid, d in zip(shared, differences, strict=True) if d < 0],
        "ties": sum(1 for d in differences if d == 0),
    }


def _share(attempts: Sequence[Attempt]) -> float:
    return sum(item.grade.resolved for item in attempts) / len(attempts) if attempts else 0.0


def _bootstrap(differences: Sequence[float]) -> tuple[float, float]:
    generator = random.Random(SEED)
    size = len(differences)
    means = sorted(sum(generator.choices(differences, k=size)) / size for _ in range(RESAMPLES))
    return means[int(0.025 * RESAMPLES)], means[int(0.975 * RESAMPLES) - 1]
