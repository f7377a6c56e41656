"""A run's conversation as plain JSON values, so another process can continue it.

A durable engine ends the process's part of a run when the agent asks a person
something (the answer may come days later, to another worker process); what the
run had — its messages, what it spent, the question's call — is written out here
and read back by :meth:`~errand.agent.Agent.restore`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from errand.models import Message, ToolCall

__all__ = ["message_from_json", "message_to_json"]


def message_to_json(message: Message) -> dict[str, Any]:
    return {"role": message.role, "content": message.content, "tool_call_id": message.tool_call_id,
            "cache": message.cache,
            "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments, "malformed": c.malformed}
                           for c in message.tool_calls]}


def message_from_json(data: Mapping[str, Any]) -> Message:
    calls = [ToolCall(str(c["id"]), str(c["name"]), dict(c.get("arguments") or {}), c.get("malformed"))
             for c in data.get("tool_calls") or ()]
    return Message(data["role"], str(data.get("content") or ""), calls, data.get("tool_call_id"),
                   cache=bool(data.get("cache")))
