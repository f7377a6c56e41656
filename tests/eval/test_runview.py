"""A run directory as a person reads it: the runs under a directory latest first, one run's figures
computed again from its grades, each attempt's patch and trajectory, and names looked up, never joined."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from errand.eval.errors import EvalError
from errand.eval.grading import Grade
from errand.eval.runs import attempt_dir, save_grade, write_json
from errand.eval.runview import find_run, list_runs, read_run


def make_run(root: Path, name: str, modified: float) -> Path:
    run = root / name
    save_grade(run, Grade("acme__w-1", "attempt-1", "resolved"))
    save_grade(run, Grade("acme__w-1", "attempt-2", "unresolved", error="tests_failed", failure="agent"),
               patch="diff --git a/given b/given\n")
    save_grade(run, Grade("acme__w-2", "attempt-1", "unresolved", error="setup_failed", failure="infrastructure"))
    write_json(run / "run.json", {"command": "run", "model": "openai:gpt-4.1", "k": 2})
    write_json(run / "summary.json", {"resolved": 1})
    os.utime(run / "summary.json", (modified, modified))
    return run


def test_the_runs_under_a_directory_latest_first(tmp_path: Path) -> None:
    make_run(tmp_path, "run-old", 1_000_000)
    make_run(tmp_path, "validate-new", 2_000_000)
    (tmp_path / "not-a-run").mkdir()
    (tmp_path / "stray.txt").write_text("x")
    runs = list_runs(tmp_path)
    assert [(run.name, run.kind) for run in runs] == [("validate-new", "run"), ("run-old", "run")]
    assert runs[0].summary == {"resolved": 1} and runs[0].meta["model"] == "openai:gpt-4.1"
    assert list_runs(tmp_path / "missing") == []


def test_a_run_is_found_by_name_among_the_entries_and_no_name_leaves_the_directory(tmp_path: Path) -> None:
    run = make_run(tmp_path / "runs", "run-1", 1_000_000)
    make_run(tmp_path, "outside", 1_000_000)
    assert find_run(tmp_path / "runs", "run-1") == run
    for name in ("../outside", "run-1/..", "/etc", "", "run-2"):
        with pytest.raises(EvalError) as caught:
            find_run(tmp_path / "runs", name)
        assert caught.value.code == "eval_unknown_run"


def test_a_run_s_figures_instances_and_attempts(tmp_path: Path) -> None:
    view = read_run(make_run(tmp_path, "run-1", 1_000_000))
    assert view.name == "run-1" and view.meta["k"] == 2 and not view.is_validation
    assert [(i.instance_id, i.resolved, len(i.attempts)) for i in view.instances] == [("acme__w-1", 1, 2),
                                                                                       ("acme__w-2", 0, 1)]
    assert view.summary["failures"] == {"agent": {"tests_failed": 1}, "infrastructure": {"setup_failed": 1}}
    given = view.attempt("acme__w-1", "attempt-2")
    assert given.href == "instances/acme__w-1/attempt-2" and given.anchor == "attempt-acme__w-1-attempt-2"
    assert given.patch() == "diff --git a/given b/given\n" and given.trajectory() == [] and not given.has_trajectory
    with pytest.raises(EvalError) as caught:
        view.attempt("acme__w-1", "attempt-9")
    assert caught.value.code == "eval_unknown_attempt"


def test_an_agent_s_attempt_shows_its_own_patch_and_its_trajectory(tmp_path: Path) -> None:
    run = make_run(tmp_path, "run-1", 1_000_000)
    where = attempt_dir(run, "acme__w-1", "attempt-1")
    write_json(where / "agent.json", {"patch": "diff --git a/agent b/agent\n", "tokens": 10})
    write_json(where / "trajectory.json", [{"time": 1.0, "kind": "model", "data": {}}, "junk", 7])
    attempt = read_run(run).attempt("acme__w-1", "attempt-1")
    assert attempt.agent["tokens"] == 10 and attempt.patch() == "diff --git a/agent b/agent\n"
    assert attempt.trajectory() == [{"time": 1.0, "kind": "model", "data": {}}]  # what is not an event is dropped
    write_json(where / "trajectory.json", {"not": "a list"})
    assert read_run(run).attempt("acme__w-1", "attempt-1").trajectory() == []


def test_a_validation_run_is_told_by_its_saved_summary(tmp_path: Path) -> None:
    run = make_run(tmp_path, "validate-1", 1_000_000)
    write_json(run / "summary.json", {"gold_resolved": 1})
    assert read_run(run).is_validation
