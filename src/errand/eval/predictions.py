"""Predictions in SWE-bench's shape: ``{instance_id, model_name_or_path, model_patch}``,
read from JSON (a list, or an object keyed by instance id) or JSONL, written as JSONL."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from errand.eval.errors import EvalError

__all__ = ["Prediction", "load_predictions", "write_predictions"]


@dataclass(frozen=True)
class Prediction:
    instance_id: str
    model_name_or_path: str
    model_patch: str

    def to_json(self) -> dict[str, str]:
        return asdict(self)


def load_predictions(path: Path) -> list[Prediction]:
    """Every prediction of the file; a record without an instance id or a string patch is refused
    (a null patch, as some harnesses write for a run that produced nothing, reads as empty)."""
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as error:
        raise EvalError(f"cannot read the predictions {path}: {error}", code="eval_bad_predictions") from None
    try:
        stripped = text.lstrip()
        if stripped.startswith("["):
            records = json.loads(text)
        elif stripped.startswith("{") and "\n{" not in stripped.rstrip():
            loaded = json.loads(text)
            records = list(loaded.values()) if "instance_id" not in loaded else [loaded]
        else:
            records = [json.loads(line) for line in text.splitlines() if line.strip()]
    except json.JSONDecodeError as error:
        raise EvalError(f"{path}: not JSON or JSON lines: {error}", code="eval_bad_predictions") from None
    if not isinstance(records, list) or not records:
        raise EvalError(f"{path} holds no predictions: expected SWE-bench's {{instance_id, model_name_or_path, "
                        "model_patch}, one a line or as a JSON list", code="eval_bad_predictions")
    return [_prediction(record, f"{path}: prediction {n}") for n, record in enumerate(records, 1)]


def _prediction(record: object, where: str) -> Prediction:
    if not isinstance(record, dict) or not isinstance(record.get("instance_id"), str):
        raise EvalError(f"{where}: expected an object with an instance_id", code="eval_bad_predictions")
    patch = record.get("model_patch")
    if patch is None:
        patch = ""
    if not isinstance(patch, str):
        raise EvalError(f"{where}: model_patch must be a string", code="eval_bad_predictions")
    return Prediction(record["instance_id"], str(record.get("model_name_or_path") or "unknown"), patch)


def write_predictions(path: Path, predictions: Iterable[Prediction]) -> None:
    Path(path).write_text("".join(json.dumps(p.to_json()) + "\n" for p in predictions))
