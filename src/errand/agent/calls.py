"""Checking a tool call against the tools offered, before anything runs.

Open-weight models behind vLLM, Ollama or llama.cpp often call a tool that does
not exist, write arguments that are not JSON, or leave out a field. Each of
those becomes a tool result that says what was wrong and what the tool takes,
so the model can correct itself; none of them fails the run. The check covers
the JSON Schema the tools are written in (object properties, required fields,
no extra fields, scalar and array types), not the whole of JSON Schema.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from errand.models import Tool, ToolCall

__all__ = ["problem_with"]

_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,), "array": (list,),
    "object": (dict,),
}


def problem_with(call: ToolCall, tools: Sequence[Tool]) -> str | None:
    """Why ``call`` cannot run as written, for the model to read; ``None`` when it can."""
    tool = next((t for t in tools if t.name == call.name), None)
    if tool is None:
        names = ", ".join(t.name for t in tools)
        return f"error: unknown tool {call.name!r}; the tools are {names}. Call one of them by its exact name."
    if call.malformed is not None:
        return f"error: {call.name}: the call was not run: {call.malformed}. {_expects(tool)}"
    problem = _against_schema(call.arguments, tool.parameters)
    return None if problem is None else f"error: {call.name}: {problem}. {_expects(tool)}"


def _against_schema(arguments: dict[str, Any], schema: dict[str, Any]) -> str | None:
    properties: dict[str, Any] = schema.get("properties", {})
    missing = [name for name in schema.get("required", []) if name not in arguments]
    if missing:
        return f"missing required field{'s' if len(missing) > 1 else ''} {', '.join(map(repr, missing))}"
    if schema.get("additionalProperties") is False:
        extra = sorted(set(arguments) - set(properties))
        if extra:
            return f"unknown field{'s' if len(extra) > 1 else ''} {', '.join(map(repr, extra))}"
    for name, value in arguments.items():
        wrong = _wrong_type(value, properties.get(name, {}))
        if wrong is not None:
            return f"field {name!r} {wrong}"
    return None


def _wrong_type(value: Any, schema: dict[str, Any]) -> str | None:
    expected = schema.get("type")
    if not isinstance(expected, str) or expected not in _TYPES:
        return None
    # bool is an int to Python, never to JSON Schema.
    if not isinstance(value, _TYPES[expected]) or (isinstance(value, bool) and expected != "boolean"):
        return f"must be {'an' if expected[0] in 'aeiou' else 'a'} {expected}, not {_json_type(value)}"
    if expected == "array" and isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            wrong = _wrong_type(item, schema["items"])
            if wrong is not None:
                return f"holds an item that {wrong}"
    return None


def _json_type(value: Any) -> str:
    names = {bool: "a boolean", str: "a string", int: "an integer", float: "a number", list: "an array",
             dict: "an object", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def _expects(tool: Tool) -> str:
    properties = tool.parameters.get("properties", {})
    required = set(tool.parameters.get("required", []))
    fields = [f"{name}: {spec.get('type', 'any')}{'' if name in required else ' (optional)'}"
              for name, spec in properties.items()]
    return f"{tool.name} takes a JSON object with {', '.join(fields) or 'no fields'}."
