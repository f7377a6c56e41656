"""Comparing two runs over the instances they share, and a run directory that keeps its model.

The formats' own tests follow their modules: test_dataset, test_predictions, test_junit, test_patches,
test_metrics."""

from __future__ import annotations

import json
from pathlib import Path

from shapes import SPECS, attempt, swe_record
from typer.testing import CliRunner

from errand.cli import app
from errand.eval.compare import compare


def test_compare_is_paired_over_shared_instances() -> None:
    a = {iid: [attempt(iid, False)] for iid in "abcd"}
    b = {iid: [attempt(iid, iid in "abc")] for iid in "abce"}
    result = compare(a, b)
    assert result["instances"] == 3 and result["only_in_a"] == ["d"] and result["only_in_b"] == ["e"]
    assert result["difference"] == 1.0 and result["b_better"] == ["a", "b", "c"]
    assert result["ci95"] == [1.0, 1.0]
    mixed = compare({iid: [attempt(iid, iid == "a")] for iid in "abcd"},
                    {iid: [attempt(iid, iid in "bc")] for iid in "abcd"})
    low, high = mixed["ci95"]
    assert low < mixed["difference"] < high


def test_a_run_directory_keeps_its_model(tmp_path: Path) -> None:
    (tmp_path / "data.jsonl").write_text(json.dumps(swe_record()) + "\n")
    (tmp_path / "specs.toml").write_text(SPECS)
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"command": "run", "model": "openai:first", "k": 3}))
    result = CliRunner().invoke(app, ["eval", "run", str(tmp_path / "data.jsonl"), "--model", "openai:second",
                                      "--run-dir", str(run)])
    assert result.exit_code == 2
    assert "holds a run of openai:first" in result.output.replace("\n", " ")
    assert json.loads((run / "run.json").read_text())["model"] == "openai:first"
