"""An AgentResult as plain JSON, read back whole by another process (a round's other worker)."""

from __future__ import annotations

import json
from typing import Any

from errand.agent import AgentResult, Spent
from errand.models import Message, ToolCall


def finished() -> AgentResult:
    spent = Spent(steps=3, tokens=1200, cost=0.0123, seconds=4.56789, input_tokens=1000, output_tokens=200,
                  cache_read_tokens=600, cache_write_tokens=100, unpriced_calls=1, retries=2, condensations=1)
    messages = [Message("system", "you fix bugs", cache=True), Message("user", "fix add"),
                Message("assistant", "", [ToolCall("c1", "edit_file", {"path": "calc.py", "old": "-", "new": "+"}),
                                          ToolCall("c2", "write_file", {}, malformed="its arguments are not JSON")]),
                Message("tool", "edited calc.py", tool_call_id="c1")]
    return AgentResult("finished", "add adds", messages, spent, summary="add adds", assumptions=["numbers only"],
                       answer="it was a sign error")


def test_a_result_survives_json_whole() -> None:
    for result in (finished(),
                   AgentResult("needs_input", "which sign?", [], Spent(steps=1), question="which sign?"),
                   AgentResult("budget_exhausted", "step budget used up", [], Spent(steps=9), budget="steps")):
        assert AgentResult.from_json(json.loads(json.dumps(result.to_json()))) == result


def test_a_result_written_before_the_move_reads_back() -> None:
    """The JSON a worker wrote when round.py serialised results itself is the JSON of to_json."""
    result = finished()
    written: dict[str, Any] = {
        "status": "finished", "detail": "add adds", "summary": "add adds", "assumptions": ["numbers only"],
        "question": None, "budget": None, "answer": "it was a sign error",
        "spent": {"steps": 3, "tokens": 1200, "cost": 0.0123, "seconds": 4.56789, "input_tokens": 1000,
                  "output_tokens": 200, "cache_read_tokens": 600, "cache_write_tokens": 100, "unpriced_calls": 1,
                  "retries": 2, "condensations": 1},
        "messages": [
            {"role": "system", "content": "you fix bugs", "tool_call_id": None, "cache": True, "tool_calls": []},
            {"role": "user", "content": "fix add", "tool_call_id": None, "cache": False, "tool_calls": []},
            {"role": "assistant", "content": "", "tool_call_id": None, "cache": False, "tool_calls": [
                {"id": "c1", "name": "edit_file", "arguments": {"path": "calc.py", "old": "-", "new": "+"},
                 "malformed": None},
                {"id": "c2", "name": "write_file", "arguments": {}, "malformed": "its arguments are not JSON"}]},
            {"role": "tool", "content": "edited calc.py", "tool_call_id": "c1", "cache": False, "tool_calls": []}]}
    assert result.to_json() == written
    assert AgentResult.from_json(written) == result
