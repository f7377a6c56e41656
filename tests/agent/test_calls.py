"""A tool call checked against the tools offered before anything runs: each problem an answer that
says what was wrong and what the tool takes."""

from __future__ import annotations

from typing import Any

import pytest

from errand.agent.calls import problem_with
from errand.models import Tool, ToolCall

EDIT = Tool("edit_file", "Replace text.", {
    "type": "object", "required": ["path", "old"], "additionalProperties": False,
    "properties": {"path": {"type": "string"}, "old": {"type": "string"}, "count": {"type": "integer"},
                   "ratio": {"type": "number"}, "dry": {"type": "boolean"},
                   "lines": {"type": "array", "items": {"type": "integer"}}, "anything": {}}})
PING = Tool("ping", "No fields.", {"type": "object", "properties": {}})
TOOLS = [EDIT, PING]
TAKES = ("edit_file takes a JSON object with path: string, old: string, count: integer (optional), ratio: number "
         "(optional), dry: boolean (optional), lines: array (optional), anything: any (optional).")


def check(name: str, **arguments: Any) -> str | None:
    return problem_with(ToolCall("c1", name, arguments), TOOLS)


def test_a_call_that_fits_has_no_problem() -> None:
    assert check("edit_file", path="a.py", old="x", count=2, ratio=1, dry=False, lines=[1, 2], anything=None) is None
    assert check("ping") is None
    assert check("ping", extra="allowed: the schema does not forbid it") is None


def test_an_unknown_tool_is_answered_with_the_tools_there_are() -> None:
    assert check("edit") == ("error: unknown tool 'edit'; the tools are edit_file, ping. "
                             "Call one of them by its exact name.")


def test_a_malformed_call_is_answered_with_why_and_what_the_tool_takes() -> None:
    call = ToolCall("c1", "edit_file", {}, malformed="the arguments were not JSON")
    assert problem_with(call, TOOLS) == f"error: edit_file: the call was not run: the arguments were not JSON. {TAKES}"
    assert problem_with(ToolCall("c2", "ping", {}, malformed="cut off"), TOOLS) == (
        "error: ping: the call was not run: cut off. ping takes a JSON object with no fields.")


@pytest.mark.parametrize(("arguments", "problem"), [
    ({}, "missing required fields 'path', 'old'"),
    ({"path": "a.py"}, "missing required field 'old'"),
    ({"path": "a.py", "old": "x", "new": "y"}, "unknown field 'new'"),
    ({"path": "a.py", "old": "x", "b": 1, "a": 2}, "unknown fields 'a', 'b'"),
    ({"path": 3, "old": "x"}, "field 'path' must be a string, not an integer"),
    ({"path": "a.py", "old": "x", "count": True}, "field 'count' must be an integer, not a boolean"),
    ({"path": "a.py", "old": "x", "count": 1.0}, "field 'count' must be an integer, not a number"),
    ({"path": "a.py", "old": "x", "ratio": "0.5"}, "field 'ratio' must be a number, not a string"),
    ({"path": "a.py", "old": "x", "dry": 0}, "field 'dry' must be a boolean, not an integer"),
    ({"path": "a.py", "old": "x", "lines": {"1": 2}}, "field 'lines' must be an array, not an object"),
    ({"path": "a.py", "old": "x", "lines": [1, None]}, "field 'lines' holds an item that must be an integer, not null"),
    ({"path": ["a.py"], "old": "x"}, "field 'path' must be a string, not an array"),
])
def test_each_misfit_is_named(arguments: dict[str, Any], problem: str) -> None:
    assert check("edit_file", **arguments) == f"error: edit_file: {problem}. {TAKES}"
