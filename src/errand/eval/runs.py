"""A run directory: graded attempts kept one directory each, so a killed run resumes.

::

    RUN/run.json                               what was run (dataset, command, k)
    RUN/instances/<instance>/<label>/grade.json errand's grade (what resuming reads)
    RUN/instances/<instance>/<label>/report.json SWE-bench's report.json for the attempt
    RUN/instances/<instance>/<label>/agent.json  an agent's attempt: patch, spend, confidence
    RUN/instances/<instance>/<label>/trajectory.json the agent's events, step by step
    RUN/instances/<instance>/<label>/patch.diff  a given patch (grade, validate)
    RUN/report.html                            the run as a page (errand eval report --html)
    RUN/summary.json                           the figures (see errand.eval.metrics)

Every file is written to a temporary name and renamed, so a file that exists is whole.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from errand.eval.dataset import Dataset, Instance
from errand.eval.errors import EvalError
from errand.eval.grading import Grade, GradeOptions, grade
from errand.eval.metrics import Attempt

__all__ = ["GradeJob", "attempt_dir", "grade_jobs", "load_attempts", "read_json", "validate_summary",
           "write_json"]

Progress = Callable[[Grade, bool], None]  # (grade, resumed)


@dataclass(frozen=True)
class GradeJob:
    instance: Instance
    label: str
    patch: str


def attempt_dir(run: Path, instance_id: str, label: str) -> Path:
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", instance_id)
    if not safe.strip("."):  # "", "." and ".." would name the instances directory or the run's own
        safe = "_" * max(1, len(safe))
    return run / "instances" / safe / label


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    partial.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(partial, path)


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise EvalError(f"cannot read {path}: {error}", code="eval_bad_run") from None


def _saved(run: Path, job: GradeJob) -> Grade | None:
    path = attempt_dir(run, job.instance.instance_id, job.label) / "grade.json"
    if not path.is_file():
        return None
    saved = Grade.from_json(read_json(path))
    # An infrastructure failure says nothing about the patch: a resumed run tries it again.
    return None if saved.failure == "infrastructure" else saved


def save_grade(run: Path, result: Grade, patch: str | None = None) -> None:
    """The attempt's reports and, for a patch no agent's record keeps, the patch (what a report shows)."""
    where = attempt_dir(run, result.instance_id, result.label)
    if patch is not None:
        where.mkdir(parents=True, exist_ok=True)
        partial = where / f".patch.{os.getpid()}.tmp"
        partial.write_text(patch, errors="surrogateescape")
        os.replace(partial, where / "patch.diff")
    write_json(where / "report.json", result.report())
    write_json(where / "grade.json", result.to_json())  # last: its presence means the attempt is done


async def grade_jobs(jobs: Sequence[GradeJob], run: Path, *, concurrency: int = 1,
                     options: GradeOptions | None = None, progress: Progress | None = None) -> list[Grade]:
    """Grade every job not graded in ``run`` already, ``concurrency`` at a time; the grades in
    job order. An interrupted call leaves the finished ones for the next to reuse."""
    if concurrency < 1:
        raise EvalError(f"--jobs must be at least 1, not {concurrency}", code="eval_bad_jobs")
    gate = asyncio.Semaphore(concurrency)

    async def one(job: GradeJob) -> Grade:
        saved = await asyncio.to_thread(_saved, run, job)
        if saved is not None:
            if progress:
                progress(saved, True)
            return saved
        async with gate:
            result = await grade(job.instance, job.patch, job.label, options)
        await asyncio.to_thread(save_grade, run, result, job.patch)
        if progress:
            progress(result, False)
        return result

    return list(await asyncio.gather(*(one(job) for job in jobs)))


def load_attempts(run: Path) -> dict[str, list[Attempt]]:
    """Every graded attempt of ``run`` by instance, with what its agent spent where one ran."""
    root = run / "instances"
    if not root.is_dir():
        raise EvalError(f"{run} is not an evaluation run (no instances/ in it)", code="eval_bad_run")
    found: dict[str, list[Attempt]] = {}
    for path in sorted(root.glob("*/*/grade.json")):
        result = Grade.from_json(read_json(path))
        agent = read_json(path.with_name("agent.json")) if path.with_name("agent.json").is_file() else {}
        found.setdefault(result.instance_id, []).append(Attempt(
            result, confidence=agent.get("confidence"), tokens=int(agent.get("tokens", 0)),
            cost=float(agent.get("cost", 0.0)), seconds=float(agent.get("seconds", 0.0)),
            agent_status=agent.get("status"), extra={"dir": path.parent}))
    return found


def validate_summary(dataset: Dataset, grades: Sequence[Grade]) -> dict[str, Any]:
    """Gold patches must resolve, empty ones must not, and no test may change its outcome
    between repetitions of the same patch (a flaky test)."""
    by: dict[tuple[str, str], list[Grade]] = {}
    for result in grades:
        by.setdefault((result.instance_id, result.label.split("-", 1)[0]), []).append(result)
    rows: list[dict[str, Any]] = []
    flaky: list[dict[str, Any]] = []
    gold_ok = empty_bad = 0
    for instance in dataset.instances:
        gold, empty = by.get((instance.instance_id, "gold"), []), by.get((instance.instance_id, "empty"), [])
        for kind, results in (("gold", gold), ("empty", empty)):
            flaky += _flaky(instance.instance_id, kind, results)
        rows.append({"instance_id": instance.instance_id, "gold": [g.status for g in gold],
                     "empty": [g.status for g in empty],
                     "gold_errors": sorted({g.error for g in gold if g.error}),
                     "ok": all(g.resolved for g in gold) and not any(g.resolved for g in empty)})
        gold_ok += bool(gold) and all(g.resolved for g in gold)
        empty_bad += any(g.resolved for g in empty)
    instances = len(dataset.instances)
    return {"instances": instances, "gold_resolved": gold_ok, "empty_resolved": empty_bad,
            "gold_rate": round(gold_ok / instances, 4) if instances else None,
            "empty_rate": round(empty_bad / instances, 4) if instances else None,
            "flaky": flaky, "ok": gold_ok == instances and empty_bad == 0 and not flaky, "per_instance": rows}


def _flaky(instance_id: str, kind: str, results: Sequence[Grade]) -> list[dict[str, Any]]:
    if len(results) < 2:
        return []
    found: list[dict[str, Any]] = []
    names = sorted({name for result in results for name in result.tests})
    for name in names:
        seen = [result.tests.get(name, "missing") for result in results]
        if len(set(seen)) > 1:
            found.append({"instance_id": instance_id, "patch": kind, "test": name, "outcomes": seen})
    statuses = [result.status for result in results]
    if len(set(statuses)) > 1 and not found:
        found.append({"instance_id": instance_id, "patch": kind, "test": None, "outcomes": statuses})
    return found
