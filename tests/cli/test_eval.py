"""``errand eval`` in process, on run directories as ``errand eval run`` leaves them: a run summarized
again, two runs compared, the sample written, and each refusal one line on stderr with exit 2."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from errand.cli import app
from errand.eval.grading import Grade
from errand.eval.runs import attempt_dir, save_grade, write_json


def graded(run: Path, outcomes: dict[str, list[bool]], *, model: str = "openai:m") -> Path:
    """A run directory with each instance's attempts graded, and what each agent spent."""
    write_json(run / "run.json", {"command": "run", "model": model, "k": max(map(len, outcomes.values()))})
    for instance_id, resolved in outcomes.items():
        for number, done in enumerate(resolved, start=1):
            label = f"attempt-{number}"
            write_json(attempt_dir(run, instance_id, label) / "agent.json", {"tokens": 100, "cost": 0.25})
            save_grade(run, Grade(instance_id, label, "resolved" if done else "unresolved",
                                  failure=None if done else "agent", error=None if done else "tests_failed"))
    return run


def test_report_summarizes_a_run_again_and_writes_its_summary(tmp_path: Path) -> None:
    run = graded(tmp_path / "run", {"acme__w-1": [True, False], "acme__w-2": [False, False]})
    result = CliRunner().invoke(app, ["eval", "report", str(run), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert (summary["instances"], summary["attempts_per_instance"], summary["resolved_attempts"]) == (2, 2, 1)
    assert summary["tokens"] == 400 and summary["cost"] == 1.0
    assert json.loads((run / "summary.json").read_text()) == summary
    shown = CliRunner().invoke(app, ["eval", "report", str(run)])
    assert shown.exit_code == 0 and "resolved 1 of 4 attempts" in " ".join(shown.stdout.split())


def test_compare_says_the_difference_of_two_runs_over_the_instances_they_share(tmp_path: Path) -> None:
    a = graded(tmp_path / "a", {"x": [False], "y": [True], "z": [False]})
    b = graded(tmp_path / "b", {"x": [True], "y": [True], "w": [True]})
    result = CliRunner().invoke(app, ["eval", "compare", str(a), str(b), "--json"])
    assert result.exit_code == 0, result.output
    compared = json.loads(result.stdout)
    assert compared["instances"] == 2 and compared["b_better"] == ["x"] and compared["difference"] == 0.5
    assert (compared["only_in_a"], compared["only_in_b"]) == (["z"], ["w"])
    shown = " ".join(CliRunner().invoke(app, ["eval", "compare", str(a), str(b)]).stdout.split())
    assert "2 shared instances: A resolved 50.0%, B resolved 100.0%" in shown
    assert "B better on 1, A better on 0, 1 ties" in shown


def test_a_refusal_is_one_error_line_and_exit_2(tmp_path: Path) -> None:
    a = graded(tmp_path / "a", {"x": [True]})
    b = graded(tmp_path / "b", {"y": [True]})
    for arguments in (["compare", str(a), str(b)], ["report", str(tmp_path / "no-run")],
                      ["compare", str(a), str(tmp_path)]):
        result = CliRunner().invoke(app, ["eval", *arguments])
        assert result.exit_code == 2, result.output
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
        assert result.stdout == "" and "Traceback" not in result.output
    assert not (tmp_path / "no-run").exists()


def test_sample_writes_the_dataset_and_its_specs(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["eval", "sample", str(tmp_path / "sample")])
    assert result.exit_code == 0, result.output
    dataset = tmp_path / "sample" / "dataset.jsonl"
    said = f"wrote {dataset} and {dataset.with_name('specs.toml')}"
    assert "".join(result.stdout.split()) == "".join(said.split())  # rich wraps it at the terminal's width
    assert len(dataset.read_text().splitlines()) == 15 and "[repos." in dataset.with_name("specs.toml").read_text()
