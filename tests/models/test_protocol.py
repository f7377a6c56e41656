from __future__ import annotations

import pytest

from errand.errors import ConfigError
from errand.models import Message, ToolCall


def test_assistant_message_carries_tool_calls() -> None:
    call = ToolCall("call_1", "run", {"command": "ls"})
    message = Message("assistant", "", [call])
    assert message.tool_calls == [call]
    assert Message("user", "hi").tool_calls == []


def test_tool_message_needs_the_call_it_answers() -> None:
    with pytest.raises(ConfigError, match="tool_call_id"):
        Message("tool", "output")
    with pytest.raises(ConfigError, match="tool_call_id"):
        Message("user", "hi", tool_call_id="call_1")


def test_only_assistant_messages_carry_tool_calls() -> None:
    with pytest.raises(ConfigError, match="only assistant"):
        Message("user", "hi", [ToolCall("call_1", "run", {})])


def test_unknown_role_is_rejected() -> None:
    with pytest.raises(ConfigError, match="role"):
        Message("robot", "hi")  # type: ignore[arg-type]
