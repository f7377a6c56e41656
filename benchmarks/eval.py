#!/usr/bin/env python3
"""What grading costs beyond the tests' own time, on the shipped sample dataset.

    .venv/bin/python benchmarks/eval.py [--jobs 1 2] [--isolation namespace|gvisor] [--quick]

The sample is 15 instances over 3 repositories. The environments are set up
first (a warm-up grade of one instance per repository, which pays setup once
each); then, for each ``--jobs`` value, every instance's gold patch is graded in
a fresh run directory. Per instance, *overhead* is the grade's wall time less
the test command's own wall time in the sandbox (stripping, checkout, patches,
sandbox start and end, reading the report). It prints the total wall time and
the overhead's p50 and p95. Goal: overhead p50 <= 1 s. It reports, it does not
assert. Needs root, like the sandbox tiers.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from errand import _settings
from errand.eval.dataset import load_dataset
from errand.eval.grading import GradeOptions
from errand.eval.runs import GradeJob, grade_jobs
from errand.eval.sample import sample_dir


def p95(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


async def measure(jobs: list[GradeJob], concurrency: int, options: GradeOptions) -> None:
    with tempfile.TemporaryDirectory(prefix="errand-eval-bench-") as scratch:
        start = time.perf_counter()
        grades = await grade_jobs(jobs, Path(scratch), concurrency=concurrency, options=options)
        wall = time.perf_counter() - start
    resolved = sum(g.resolved for g in grades)
    overhead = [g.seconds["total"] - g.seconds.get("tests", 0.0) for g in grades]
    tests = [g.seconds.get("tests", 0.0) for g in grades]
    print(f"--jobs {concurrency}: {len(grades)} instances, {resolved} resolved, total wall {wall:.2f} s, "
          f"tests' own time p50 {statistics.median(tests):.3f} s; overhead per instance "
          f"p50 {statistics.median(overhead):.3f} s, p95 {p95(overhead):.3f} s "
          f"(goal p50 <= 1 s: {'met' if statistics.median(overhead) <= 1 else 'NOT met'})")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--isolation", default="namespace")
    parser.add_argument("--quick", action="store_true", help="a run of seconds: one repository's instances, --jobs 1")
    args = parser.parse_args()
    dataset_path = sample_dir(_settings.cache_dir())
    dataset = load_dataset(dataset_path, specs=dataset_path.with_name("specs.toml"))
    options = GradeOptions(isolation=args.isolation)
    jobs = [GradeJob(instance, "gold-1", instance.patch) for instance in dataset.instances]
    repos = list(dataset.repos)[:1] if args.quick else list(dataset.repos)
    if args.quick:
        jobs, args.jobs = [job for job in jobs if job.instance.repo in repos][:2], [1]
    warm = [next(job for job in jobs if job.instance.repo == repo) for repo in repos]
    with tempfile.TemporaryDirectory(prefix="errand-eval-warm-") as scratch:
        start = time.perf_counter()
        await grade_jobs(warm, Path(scratch), options=options)
        print(f"environments: {len(repos)} repositories set up (or found cached) in "
              f"{time.perf_counter() - start:.2f} s")
    for concurrency in args.jobs:
        await measure(jobs, concurrency, options)


if __name__ == "__main__":
    asyncio.run(main())
