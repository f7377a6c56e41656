"""`errand eval run` end to end: the real OpenAI SDK talking to a loopback server that speaks its
wire protocol, three attempts at each of two sample instances, graded in real sandboxes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from engine.harness import openai_turn
from errand.cli import app
from models.wire import WireServer

pytestmark = pytest.mark.slow

TOTAL_FIX = ("edit_file", {"path": "src/tally/core.py", "old": "return round(sum(amounts))",
                           "new": "return round(sum(amounts), 2)"})
WRONG_PARSE = ("edit_file", {"path": "src/tally/core.py", "old": "return float(text.strip())",
                             "new": "return float(text.strip().replace(',', '.'))"})
HISTORY = ("shell", {"command": "git log --all --oneline"})
FINISH = ("finish", {"summary": "done", "assumptions": []})
# Attempts run one after another with --jobs 1, so the server's answers go out in this order.
SCRIPTS = [
    [[HISTORY], [TOTAL_FIX], [FINISH]],  # tally-1, attempt 1: resolves
    [[FINISH]],  # tally-1, attempt 2: changes nothing
    [[TOTAL_FIX], [FINISH]],  # tally-1, attempt 3: resolves
    [[FINISH]],  # tally-2: never resolved
    [[WRONG_PARSE], [FINISH]],
    [[FINISH]],
]


def test_run_reports_pass_at_k_and_calibration(wire: WireServer, tmp_path: Path) -> None:
    n = 0
    for script in SCRIPTS:
        for turn in script:
            wire.answer(openai_turn(turn, n))
            n += 1
    run = tmp_path / "run"
    result = CliRunner().invoke(app, ["eval", "run", "sample", "--model", "openai:wire-model", "-k", "3",
                                      "-i", "errand-eval__tally-1", "-i", "errand-eval__tally-2",
                                      "--run-dir", str(run), "--json"])
    assert result.exit_code == 0, result.output
    assert len(wire.requests) == n and all(r.path == "/v1/chat/completions" for r in wire.requests)
    summary = json.loads(result.stdout)
    per = summary["per_instance"]
    assert (per["errand-eval__tally-1"]["resolved"], per["errand-eval__tally-2"]["resolved"]) == (2, 0)
    # By hand, n=3 attempts: tally-1 c=2, tally-2 c=0.
    # pass@1 = (2/3 + 0)/2; pass@2 = (1 - C(1,2)/C(3,2) + 0)/2 = 1/2; pass@3 = 1/2.
    # pass^1 = 1/3; pass^2 = (C(2,2)/C(3,2) + 0)/2 = 1/6; pass^3 = 0.
    assert summary["pass_at_k"] == pytest.approx({"1": 1 / 3, "2": 0.5, "3": 0.5}, abs=1e-6)
    assert summary["pass_hat_k"] == pytest.approx({"1": 1 / 3, "2": 1 / 6, "3": 0.0}, abs=1e-6)
    assert summary["tokens"] == 120 * n
    # Calibration: each attempt's confidence level against the grade.
    table = {row["confidence"]: (row["attempts"], row["resolved"]) for row in summary["calibration"]}
    assert sum(attempts for attempts, _ in table.values()) == 6
    assert table["low"] == (3, 0)  # the three that changed nothing
    assert table["medium"] == (3, 2)  # tests passed on the base too and no test was added: two were right

    trajectory = json.loads((run / "instances/errand-eval__tally-1/attempt-1/trajectory.json").read_text())
    history = next(e["data"]["content"] for e in trajectory if e["kind"] == "tool_result")
    assert "tally 1.0.0" in history and "Fix:" not in history  # the fixes are not in the agent's clone
    predictions = [json.loads(line) for line in (run / "predictions-attempt-1.jsonl").read_text().splitlines()]
    assert [p["instance_id"] for p in predictions] == ["errand-eval__tally-1", "errand-eval__tally-2"]
    assert "round(sum(amounts), 2)" in predictions[0]["model_patch"] and predictions[1]["model_patch"] == ""

    shown = CliRunner().invoke(app, ["eval", "report", str(run)])
    assert shown.exit_code == 0
    assert "pass@1=0.333 pass@2=0.500 pass@3=0.500" in shown.output
    compared = CliRunner().invoke(app, ["eval", "compare", str(run), str(run), "--json"])
    assert json.loads(compared.output)["difference"] == 0.0
