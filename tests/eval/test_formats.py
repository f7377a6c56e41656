"""A run directory that keeps its model.

The formats' own tests follow their modules: test_dataset, test_predictions, test_junit, test_patches,
test_metrics, test_compare."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from errand.cli import app
from eval.shapes import SPECS, swe_record


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
