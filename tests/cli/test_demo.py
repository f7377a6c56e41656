"""``errand demo`` as a real process: a real task taken to its accept with the scripted model."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from .test_app import errand, live_ids


def test_demo_runs_a_real_task_to_its_accept_with_the_scripted_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ERRAND_MODEL", raising=False)
    before = live_ids()
    result = errand("demo")
    assert result.returncode == 0, result.stdout + result.stderr
    out = " ".join(result.stdout.split())  # rich wraps lines at the terminal width
    assert "No model is configured" in out and "scripted demo model" in out
    for fact in ("1. submitted", "→ edit_file", "ready for review", "tests on base: fail (exit 1) — 1 passed, 1 failed",
                 "tests after: pass — 2 passed", "+ return round(subtotal * (1 - discount_percent / 100), 2)",
                 "5. accepted", "untouched: still on main", "done."):
        assert fact in out, fact
    sample = Path(re.search(r"at (\S+/demo/pricing-\S+): pricing.py", out).group(1))  # type: ignore[union-attr]
    branches = subprocess.run(["git", "branch", "--list", "errand/*"], cwd=sample, capture_output=True,
                              text=True, check=True).stdout
    assert branches.strip().startswith("errand/t-")
    assert live_ids() == before
