"""``errand tour`` as a real process: each step of the sandbox's tour said, and nothing left behind."""

from __future__ import annotations

from .test_app import errand, live_ids


def test_tour_runs_to_completion() -> None:
    before = live_ids()
    result = errand("tour")
    assert result.returncode == 0, result.stdout + result.stderr
    for step in ("1. create", "2. exec", "3. files", "4. snapshot and fork", "5. containment", "6. teardown"):
        assert step in result.stdout
    for fact in ("tick 5", "hello from the sandbox", "remember: tests live in tests/", "uid=0(root)",
                 "no network", "memory limit → killed by signal", "not listed", "done."):
        assert fact in result.stdout
    assert "UNEXPECTED" not in result.stdout and "STILL LISTED" not in result.stdout
    assert live_ids() == before
