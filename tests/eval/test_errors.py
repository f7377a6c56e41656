"""The evaluation layer's one error: bad input, so a configuration error (a command exits 2), whose
message names the file and the record at fault and whose code says which refusal it was."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from errand.cli import app
from errand.errors import ConfigError
from errand.eval.dataset import load_dataset
from errand.eval.errors import EvalError
from errand.eval.predictions import load_predictions
from eval.shapes import SPECS, swe_record


def test_an_eval_error_is_bad_input_with_a_code_of_its_own() -> None:
    error = EvalError("data.jsonl: record 2: missing repo")
    assert isinstance(error, ConfigError) and error.code == "eval_invalid" and ConfigError.code == "invalid_config"
    assert EvalError("x", code="eval_bad_dataset").code == "eval_bad_dataset"


def test_the_message_names_the_file_and_the_record_at_fault(tmp_path: Path) -> None:
    data, specs = tmp_path / "data.jsonl", tmp_path / "specs.toml"
    specs.write_text(SPECS)
    data.write_text(json.dumps(swe_record()) + "\n" + json.dumps(swe_record(instance_id="b", repo=None)) + "\n")
    with pytest.raises(EvalError) as caught:
        load_dataset(data, specs=specs)
    assert caught.value.message.startswith(f"{data}: record 2:") and caught.value.code == "eval_bad_dataset"
    predictions = tmp_path / "predictions.jsonl"
    predictions.write_text('{"instance_id": "a", "model_patch": ""}\n{"model_patch": "diff"}\n')
    with pytest.raises(ConfigError) as caught_config:
        load_predictions(predictions)
    assert caught_config.value.message.startswith(f"{predictions}: prediction 2:")
    assert caught_config.value.code == "eval_bad_predictions"


def test_a_command_given_bad_input_exits_2_with_the_message(tmp_path: Path) -> None:
    data = tmp_path / "data.jsonl"
    data.write_text("[]\n")
    result = CliRunner().invoke(app, ["eval", "validate", str(data), "--run-dir", str(tmp_path / "run")])
    assert result.exit_code == 2, result.output
    assert result.stderr == f"error: {data} holds no instances\n"
    assert not (tmp_path / "run").exists()  # refused before anything was written
