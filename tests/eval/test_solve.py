"""``errand eval run``'s attempts: the agent's prompt, a run that goes on keeping the attempts already
graded (and writing each attempt's predictions from their records), bad counts refused first."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from errand.eval.dataset import Instance, load_dataset
from errand.eval.errors import EvalError
from errand.eval.grading import Grade
from errand.eval.predictions import load_predictions
from errand.eval.runs import attempt_dir, save_grade, write_json
from errand.eval.solve import RunOptions, prompt_for, run_attempts
from eval.shapes import SPECS, swe_record


def instances(tmp_path: Path) -> tuple[Instance, ...]:
    records = [swe_record(instance_id=f"acme__widgets-{n}", problem_statement=f"  Bug {n} breaks.\n")
               for n in (1, 2)]
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))
    (tmp_path / "specs.toml").write_text(SPECS)
    return load_dataset(tmp_path / "data.jsonl", specs=tmp_path / "specs.toml").instances


def test_the_prompt_is_the_problem_statement_and_where_the_repository_is(tmp_path: Path) -> None:
    prompt = prompt_for(instances(tmp_path)[0])
    assert prompt.startswith("Bug 1 breaks.\n\nThe repository is checked out at /workspace.")
    assert "run its tests" in prompt


def test_a_run_that_goes_on_keeps_what_was_graded_and_writes_the_predictions(tmp_path: Path) -> None:
    given, run = instances(tmp_path), tmp_path / "run"
    for instance in given:
        for number in (1, 2):
            label = f"attempt-{number}"
            write_json(attempt_dir(run, instance.instance_id, label) / "agent.json",
                       {"patch": f"diff of {instance.instance_id} {label}\n"})
            save_grade(run, Grade(instance.instance_id, label, "resolved" if number == 1 else "unresolved",
                                  failure=None if number == 1 else "agent"))
    seen: list[tuple[str, str, bool]] = []
    grades = asyncio.run(run_attempts(given, run, RunOptions("openai:m", attempts=2),
                                      lambda grade, kept: seen.append((grade.instance_id, grade.label, kept))))
    assert [(g.instance_id, g.label, g.status) for g in grades] == [
        ("acme__widgets-1", "attempt-1", "resolved"), ("acme__widgets-1", "attempt-2", "unresolved"),
        ("acme__widgets-2", "attempt-1", "resolved"), ("acme__widgets-2", "attempt-2", "unresolved")]
    assert sorted(seen) == [(g.instance_id, g.label, True) for g in grades]
    for number in (1, 2):
        predictions = load_predictions(run / f"predictions-attempt-{number}.jsonl")
        assert [(p.instance_id, p.model_name_or_path, p.model_patch) for p in predictions] == [
            (i.instance_id, "openai:m", f"diff of {i.instance_id} attempt-{number}\n") for i in given]


@pytest.mark.parametrize("options", [RunOptions("openai:m", attempts=0), RunOptions("openai:m", concurrency=0)])
def test_no_attempt_or_no_worker_is_refused_before_anything_runs(tmp_path: Path, options: RunOptions) -> None:
    with pytest.raises(EvalError) as caught:
        asyncio.run(run_attempts(instances(tmp_path), tmp_path / "run", options))
    assert caught.value.code == "eval_bad_jobs" and not (tmp_path / "run").exists()
