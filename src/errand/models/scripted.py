"""A model that replays a script: deterministic, offline, for tests and demos.

A script is a list of assistant turns. In Python, each is a :class:`Message`
or a plain string (text only). In a file (``scripted:PATH``), it is either a
JSON list of turns or JSON lines, one turn per line; a turn is an object::

    {"content": "Let me look.", "tool_calls": [{"name": "run", "arguments": {"command": "ls"}}]}

``content`` defaults to ``""``; a tool call's ``id`` defaults to
``call_<turn>_<index>`` so replays are reproducible.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from errand.errors import ConfigError
from errand.models.errors import ModelError
from errand.models.protocol import Message, Reply, Tool, ToolCall, Usage

__all__ = ["ScriptedModel"]


class ScriptedModel:
    """Answers each :meth:`complete` with the next turn of its script.

    Every call is recorded in :attr:`calls` (the messages and tools it was
    sent), so a test can assert what a caller showed the model.
    """

    def __init__(self, script: Iterable[Message | str] = (), *, name: str = "scripted") -> None:
        self.name = name
        self._script: list[Message] = []
        self._next = 0
        self.calls: list[tuple[list[Message], list[Tool]]] = []
        self.extend(script)

    @classmethod
    def from_file(cls, path: str | Path) -> ScriptedModel:
        """Load a script from a JSON list or JSON-lines file (see the module docstring)."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as error:
            raise ConfigError(f"cannot read model script {path}: {error.strerror or error}") from error
        turns = _parse_script(text, path)
        return cls([_turn_from_json(turn, index, path) for index, turn in enumerate(turns)], name=f"scripted:{path}")

    def extend(self, script: Iterable[Message | str]) -> None:
        """Append turns to the script (like llm's ``MockModel.enqueue``)."""
        for turn in script:
            message = Message("assistant", turn) if isinstance(turn, str) else turn
            if message.role != "assistant":
                raise ConfigError(f"a model script holds assistant turns, not {message.role} messages")
            self._script.append(message)

    def skip(self, turns: int) -> None:
        """Go on from turn ``turns`` of the script (unless this copy is past it): a run continued
        in another process, after a question, made those replies already with another copy."""
        self._next = max(self._next, min(len(self._script), turns))

    @property
    def remaining(self) -> int:
        return len(self._script) - self._next

    async def complete(self, messages: Sequence[Message], tools: Sequence[Tool]) -> Reply:
        self.calls.append((list(messages), list(tools)))
        if self._next >= len(self._script):
            raise ModelError(
                f"{self.name} ran out of replies after {len(self._script)}; "
                "the caller asked for more turns than the script holds — add turns to the script",
                provider="scripted", code="script_exhausted",
            )
        message = self._script[self._next]
        self._next += 1
        return Reply(message, Usage(), cost=0.0, raw_stop="tool_calls" if message.tool_calls else "stop")


def _parse_script(text: str, path: Path) -> list[Any]:
    if text.lstrip().startswith("["):
        try:
            turns = json.loads(text)
        except json.JSONDecodeError as error:
            raise ConfigError(f"{path}: not valid JSON ({error})") from error
        if not isinstance(turns, list):
            raise ConfigError(f"{path}: expected a JSON list of turns")
        return turns
    turns = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            turns.append(json.loads(line))
        except json.JSONDecodeError as error:
            raise ConfigError(f"{path}:{number}: not valid JSON ({error.msg})") from error
    return turns


def _turn_from_json(turn: Any, index: int, path: Path) -> Message:
    where = f"{path}: turn {index + 1}"
    if isinstance(turn, str):
        return Message("assistant", turn)
    if not isinstance(turn, dict) or not set(turn) <= {"content", "tool_calls"}:
        raise ConfigError(f"{where}: expected a string or an object with only 'content' and 'tool_calls'")
    content = turn.get("content", "")
    calls = turn.get("tool_calls", [])
    if not isinstance(content, str) or not isinstance(calls, list):
        raise ConfigError(f"{where}: 'content' must be a string and 'tool_calls' a list")
    return Message("assistant", content, [_call_from_json(call, index, n, where) for n, call in enumerate(calls)])


def _call_from_json(call: Any, turn: int, index: int, where: str) -> ToolCall:
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        raise ConfigError(f"{where}: each tool call needs a string 'name'")
    arguments = call.get("arguments", {})
    call_id = call.get("id", f"call_{turn + 1}_{index + 1}")
    if not isinstance(arguments, dict) or not isinstance(call_id, str):
        raise ConfigError(f"{where}: a tool call's 'arguments' must be an object and its 'id' a string")
    return ToolCall(call_id, call["name"], arguments)
