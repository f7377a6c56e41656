"""Reading predictions in the shapes SWE-bench writes them: JSONL lines, or one JSON object by instance."""

from __future__ import annotations

import json
from pathlib import Path

from errand.eval.predictions import load_predictions


def test_predictions_in_swe_bench_shapes(tmp_path: Path) -> None:
    one = {"instance_id": "a", "model_name_or_path": "m", "model_patch": "diff"}
    (tmp_path / "p.jsonl").write_text(json.dumps(one) + "\n" + json.dumps({**one, "instance_id": "b",
                                                                            "model_patch": None}) + "\n")
    (tmp_path / "p.json").write_text(json.dumps({"a": one}))
    assert [(p.instance_id, p.model_patch) for p in load_predictions(tmp_path / "p.jsonl")] == [("a", "diff"),
                                                                                                ("b", "")]
    assert load_predictions(tmp_path / "p.json")[0].model_name_or_path == "m"
