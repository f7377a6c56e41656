"""A run directory on disk: attempts saved where an instance's id cannot lead out of it, JSON written
whole or not at all, and every graded attempt read back with what its agent spent."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from errand.eval.dataset import Dataset, Instance, RepoSpec
from errand.eval.errors import EvalError
from errand.eval.grading import Grade
from errand.eval.runs import (
    attempt_dir,
    grade_jobs,
    load_attempts,
    read_json,
    save_grade,
    validate_summary,
    write_json,
)


def test_an_instance_id_never_leads_out_of_the_run(tmp_path: Path) -> None:
    assert attempt_dir(tmp_path, "django__django-11099", "attempt-1") == (
        tmp_path / "instances" / "django__django-11099" / "attempt-1")
    for hostile in ("../../etc", "/abs/path", "a b\nc", "x/../..", ".", "..", "", "..."):
        where = attempt_dir(tmp_path, hostile, "attempt-1")
        assert where.parent.parent == tmp_path / "instances" and "/" not in where.parent.name
    assert attempt_dir(tmp_path, "../x", "gold-1").parent.name == ".._x"


def test_json_is_written_whole_and_sorted_and_a_bad_file_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "run.json"
    write_json(path, {"model": "m", "k": 3})
    assert path.read_text() == '{\n  "k": 3,\n  "model": "m"\n}\n'
    assert read_json(path) == {"k": 3, "model": "m"}
    assert [p.name for p in path.parent.iterdir()] == ["run.json"]  # no partial file left beside it
    path.write_text("{not json")
    with pytest.raises(EvalError) as caught:
        read_json(path)
    assert caught.value.code == "eval_bad_run" and str(path) in caught.value.message
    with pytest.raises(EvalError):
        read_json(tmp_path / "missing.json")


def test_saved_grades_come_back_with_what_their_agent_spent(tmp_path: Path) -> None:
    resolved = Grade("acme__w-1", "attempt-1", "resolved", applied=True, fail_to_pass=("t::a",),
                     tests={"t::a": "passed"})
    failed = Grade("acme__w-1", "attempt-2", "unresolved", error="tests_failed", failure="agent")
    save_grade(tmp_path, resolved)
    save_grade(tmp_path, failed, patch="diff --git a/x b/x\n")
    write_json(attempt_dir(tmp_path, "acme__w-1", "attempt-1") / "agent.json",
               {"confidence": "high", "tokens": 1200, "cost": 0.02, "seconds": 3.5, "status": "finished"})
    attempts = load_attempts(tmp_path)
    assert list(attempts) == ["acme__w-1"]
    first, second = attempts["acme__w-1"]
    assert first.grade == resolved and (first.confidence, first.tokens, first.cost, first.seconds) == (
        "high", 1200, 0.02, 3.5)
    assert second.grade == failed and (second.confidence, second.tokens) == (None, 0)
    where = attempt_dir(tmp_path, "acme__w-1", "attempt-2")
    assert (where / "patch.diff").read_text() == "diff --git a/x b/x\n"
    report = json.loads((attempt_dir(tmp_path, "acme__w-1", "attempt-1") / "report.json").read_text())
    assert report["acme__w-1"]["resolved"] is True
    assert report["acme__w-1"]["tests_status"]["FAIL_TO_PASS"] == {"success": ["t::a"], "failure": []}


def test_an_attempt_without_its_grade_is_not_done(tmp_path: Path) -> None:
    (attempt_dir(tmp_path, "acme__w-1", "attempt-1")).mkdir(parents=True)
    write_json(attempt_dir(tmp_path, "acme__w-1", "attempt-1") / "report.json", {})
    assert load_attempts(tmp_path) == {}


def test_a_directory_that_is_no_run_is_refused(tmp_path: Path) -> None:
    with pytest.raises(EvalError) as caught:
        load_attempts(tmp_path)
    assert caught.value.code == "eval_bad_run"


def test_grading_with_no_worker_is_refused_before_anything_runs(tmp_path: Path) -> None:
    with pytest.raises(EvalError) as caught:
        asyncio.run(grade_jobs([], tmp_path, concurrency=0))
    assert caught.value.code == "eval_bad_jobs" and not (tmp_path / "instances").exists()
    assert asyncio.run(grade_jobs([], tmp_path)) == []


def test_a_validation_names_a_test_that_flips_between_runs_of_the_same_patch(tmp_path: Path) -> None:
    """The sample validates clean (tests/eval/test_grading.py); here a test passes in one run of the
    gold patch and fails in the other, and an empty patch's runs end differently with no test to name."""
    instance = Instance("o__r-1", "o/r", "abc", "fix it", "gold", "", ("t::a",), ("t::b",), RepoSpec(), "/src")
    dataset = Dataset(tmp_path / "data.json", (instance,))
    grades = [Grade("o__r-1", "gold-1", "resolved", tests={"t::a": "passed", "t::b": "passed"}),
              Grade("o__r-1", "gold-2", "resolved", tests={"t::a": "passed", "t::b": "failed"}),
              Grade("o__r-1", "empty-1", "unresolved"), Grade("o__r-1", "empty-2", "error")]
    summary = validate_summary(dataset, grades)
    assert summary["flaky"] == [
        {"instance_id": "o__r-1", "patch": "gold", "test": "t::b", "outcomes": ["passed", "failed"]},
        {"instance_id": "o__r-1", "patch": "empty", "test": None, "outcomes": ["unresolved", "error"]}]
    assert (summary["gold_resolved"], summary["empty_resolved"], summary["ok"]) == (1, 0, False)
