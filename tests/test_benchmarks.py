"""Every benchmark runs: each one's ``--quick`` mode, on real components, as CI runs it.

A benchmark is a script in ``benchmarks/`` with a ``__main__`` block (the modules
beside them that benchmarks import have none). A new benchmark is picked up
here by itself; a rename, a moved import or a section that raises fails this
test, not the next person who runs the benchmark. No timing is asserted (the
machine is shared and its figures are noisy): a run must exit 0, print
figures, and raise nothing it swallows into its report.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"


def benchmarks() -> list[Path]:
    return sorted(path for path in BENCHMARKS.glob("*.py")
                  if re.search(r"^if __name__ == .__main__.:", path.read_text(), re.MULTILINE))


# A figure: a number with a unit or a rate (12.3 ms, 4 s, 149/s, 0.82 MiB, 3.1×) or a score (0.6511).
FIGURE = re.compile(r"\d(?:[\d,]*\.?\d*)\s*(?:ms|s|/s|MiB|MB|GiB|×|%)(?![a-z])|\b\d\.\d{3,}\b|\b\d{1,3}(?:,\d{3})+\b")


def test_the_benchmarks_are_found() -> None:
    names = {path.name for path in benchmarks()}
    assert {"sandbox.py", "tasks.py", "memory.py", "engines.py"} <= names
    assert "memory_baseline.py" not in names  # a module benchmarks import, not a benchmark


def test_the_readme_lists_every_benchmark() -> None:
    readme = (BENCHMARKS / "README.md").read_text()
    missing = [path.name for path in benchmarks() if f"benchmarks/{path.name}" not in readme]
    assert not missing, f"benchmarks/README.md does not list {missing}"


def quick_runs() -> list[object]:
    """Each benchmark, as a parameter. The agents benchmark's quick mode starts codex, whose image
    layer is cached in a worker's errand home: it runs on the worker that runs codex's own tests
    (tests/grouping.py), which builds that layer once for both."""
    return [pytest.param(path, marks=pytest.mark.xdist_group("agent-cli:codex")) if path.stem == "agents" else path
            for path in benchmarks()]


@pytest.mark.slow
@pytest.mark.parametrize("path", quick_runs(), ids=lambda path: path.stem)
def test_quick_mode_runs_and_prints_figures(path: Path) -> None:
    done = subprocess.run([sys.executable, str(path), "--quick"], cwd=ROOT, capture_output=True, text=True,
                          timeout=1800, check=False)
    shown = f"stdout:\n{done.stdout[-4000:]}\nstderr:\n{done.stderr[-4000:]}"
    assert done.returncode == 0, shown
    assert FIGURE.search(done.stdout + done.stderr), f"no figures printed\n{shown}"
    assert "Traceback (most recent call last)" not in done.stderr, shown
    assert "ERROR" not in done.stdout, shown
