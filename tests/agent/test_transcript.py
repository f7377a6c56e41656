"""A run's conversation written out as JSON and read back, as another worker process reads it."""

from __future__ import annotations

import json

import pytest

from errand.agent.transcript import message_from_json, message_to_json
from errand.errors import ConfigError
from errand.models import Message, ToolCall

CONVERSATION = [
    Message("system", "You are a coding agent."),
    Message("user", "Fix add().", cache=True),
    Message("assistant", "", [ToolCall("c1", "read_file", {"path": "calc.py", "range": [1, 20]}),
                              ToolCall("c2", "shell", {}, malformed="the arguments were not JSON")]),
    Message("tool", "1: def add(a, b):", tool_call_id="c1"),
    Message("tool", "ünïcödé ✓", tool_call_id="c2"),
]


def test_a_conversation_survives_json_whole() -> None:
    back = [message_from_json(json.loads(json.dumps(message_to_json(m)))) for m in CONVERSATION]
    assert back == CONVERSATION
    assert [m.cache for m in back] == [m.cache for m in CONVERSATION]  # not compared by ==
    assert back[2].tool_calls[1].malformed == "the arguments were not JSON"


def test_missing_optional_fields_read_as_empty() -> None:
    assert message_from_json({"role": "assistant"}) == Message("assistant", "")
    assert message_from_json({"role": "assistant", "content": None, "tool_calls": None}) == Message("assistant", "")
    call = message_from_json({"role": "assistant", "tool_calls": [{"id": 1, "name": "finish", "arguments": None}]})
    assert call.tool_calls == [ToolCall("1", "finish", {})]


def test_a_message_that_could_not_have_been_written_is_refused() -> None:
    with pytest.raises(ConfigError):
        message_from_json({"role": "robot", "content": "hi"})
    with pytest.raises(ConfigError):
        message_from_json({"role": "tool", "content": "an answer to no call"})
    with pytest.raises(KeyError):
        message_from_json({"content": "no role"})
