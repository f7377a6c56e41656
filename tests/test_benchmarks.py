"""Every benchmark runs: each one's ``--quick`` mode, on real components, as CI runs it.

A benchmark is a script in ``benchmarks/`` with a ``__main__`` block (the modules
beside them that benchmarks import have none). A new benchmark is picked up
here by itself; a rename, a moved import or a section that raises fails this
test, not the next person who runs the benchmark. No timing is asserted (the
machine is shared and its figures are noisy): a run must exit 0, print
figures, and raise nothing it swallows into its report.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

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


def _sandbox_benchmark() -> Any:
    spec = importlib.util.spec_from_file_location("sandbox_benchmark", BENCHMARKS / "sandbox.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_what_a_memory_cgroup_holds_is_read_from_v1_and_from_v2(tmp_path: Path) -> None:
    """The density section's "held" figure, on a hybrid host (v1) and on a pure cgroup v2 one."""
    bench = _sandbox_benchmark()
    v1, v2, old_v2 = tmp_path / "v1", tmp_path / "v2", tmp_path / "v2-5.15"
    for directory in (v1, v2, old_v2):
        directory.mkdir()
    (v1 / "memory.stat").write_text("cache 8192\nrss 4096\nshmem 0\n")
    (v1 / "memory.kmem.usage_in_bytes").write_text("1024\n")
    (v2 / "memory.stat").write_text("anon 4096\nfile 8192\nkernel 2048\nkernel_stack 1024\nslab 512\n")
    (old_v2 / "memory.stat").write_text("anon 4096\nfile 8192\nkernel_stack 1024\npagetables 512\nslab 256\n")
    assert bench.held_in(v1) == 13312
    assert bench.held_in(v2) == 14336
    assert bench.held_in(old_v2) == 14080


def test_the_density_rows_are_made_when_what_is_held_could_not_be_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """Charged figures but no held ones (none could be read): the rows say so and judge the
    charge, rather than the section aborting on formatting None."""
    bench = _sandbox_benchmark()
    mib = bench.MIB
    figures = bench.density_figures("errand", 4, 4, 4, 4, 1.0, 1.0, [mib, 2 * mib], [], 0, 0.1, [], 8, 300)

    async def errand_density(count: int, chunk: int, settle: float) -> dict[str, Any]:
        return {**figures, "foreign_cgroup_removals": 0}

    def bwrap_density(count: int, bwrap: str, settle: float) -> dict[str, Any]:
        raise RuntimeError("no cgroup v1 memory hierarchy")

    monkeypatch.setattr(bench, "errand_density", errand_density)
    monkeypatch.setattr(bench, "bwrap_density", bwrap_density)
    report = bench.Report()
    bench.bench_density(report, 4, 4, 0.0, "bwrap", 1)
    [row] = [row for row in report.rows if row.subject == "errand AsyncSandbox: memory per sandbox (cgroup)"]
    assert "held: not read" in row.figure and "charged: mean 1.50 · max 2.00" in row.figure
    assert row.ok is (bench.DENSITY_MIB >= 2.0)
