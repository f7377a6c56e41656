#!/usr/bin/env python3
"""What a disk of its own costs a sandbox, beside a writable layer in memory.

    .venv/bin/python benchmarks/disk_medium.py [--runs N] [--isolation namespace|gvisor] [--write-mb M] [--quick]

For each medium (``Resources(disk_medium="memory")``, a tmpfs, and ``"disk"``, a
loop-mounted ext4 image), with the default quota (4 GiB) and memory limit:
create -> first ``true`` result, and create -> terminated, p50 and p95 over N
runs after 2 warm-ups, the two media interleaved run by run so drift on the
machine hits them alike. ``--write-mb`` makes each run write that much into the
sandbox before terminating (teardown then unmounts a filesystem with dirty data).
It reports, it does not assert. Needs root, like the sandbox tiers.
"""

from __future__ import annotations

import argparse
import statistics
import time

from errand import Resources, Sandbox
from errand.sandbox._backends import writable

MEDIA = ("memory", "disk")


def one(isolation: str, medium: str, write_mb: int) -> tuple[float, float]:
    start = time.perf_counter()
    with Sandbox.create(isolation=isolation, resources=Resources(disk_medium=medium), timeout=120) as sandbox:
        sandbox.run("true")
        first = time.perf_counter() - start
        if write_mb:
            sandbox.run("sh", "-c", f"head -c {write_mb * 1000 * 1000} /dev/zero > /written")
    total = time.perf_counter() - start
    # errand frees a disk's image on its own threads once terminate has returned: finish that
    # untimed, so it does not slow the next sample.
    writable.wait_freed()
    return first, total


def p95(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--isolation", default="namespace")
    parser.add_argument("--write-mb", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="a run of seconds: 3 runs after 1 warm-up")
    options = parser.parse_args()
    warmups = 2
    if options.quick:
        options.runs, warmups = 3, 1
    for medium in MEDIA:
        for _ in range(warmups):
            one(options.isolation, medium, options.write_mb)
    samples: dict[str, list[tuple[float, float]]] = {medium: [] for medium in MEDIA}
    for _ in range(options.runs):
        for medium in MEDIA:
            samples[medium].append(one(options.isolation, medium, options.write_mb))
    print(f"{options.isolation}, {options.runs} runs, write {options.write_mb} MB:")
    for medium, runs in samples.items():
        firsts, totals = [s[0] * 1000 for s in runs], [s[1] * 1000 for s in runs]
        print(f"  {medium:6}  create->first p50 {statistics.median(firsts):6.1f} ms  p95 {p95(firsts):6.1f} ms"
              f"   create->terminated p50 {statistics.median(totals):6.1f} ms  p95 {p95(totals):6.1f} ms")


if __name__ == "__main__":
    main()
