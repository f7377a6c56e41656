from __future__ import annotations

import json
from pathlib import Path

import pytest

from errand.errors import ConfigError
from errand.models import Message, Model, ModelError, ScriptedModel, Tool, ToolCall

RUN = Tool("run", "Run a shell command", {"type": "object", "properties": {"command": {"type": "string"}}})


async def test_replays_turns_in_order_and_records_what_it_was_sent() -> None:
    call = ToolCall("call_1", "run", {"command": "pytest"})
    model: Model = ScriptedModel([Message("assistant", "Running the tests.", [call]), "All green."])
    conversation = [Message("system", "You fix bugs."), Message("user", "Fix the failing test.")]

    first = await model.complete(conversation, [RUN])
    conversation += [first.message, Message("tool", "1 passed", tool_call_id="call_1")]
    second = await model.complete(conversation, [RUN])

    assert first.message.tool_calls == [call] and first.raw_stop == "tool_calls"
    assert second.message == Message("assistant", "All green.") and second.raw_stop == "stop"
    assert first.cost == 0.0 and first.usage.input_tokens == 0
    assert isinstance(model, ScriptedModel)
    sent, tools = model.calls[1]
    assert sent[-1].tool_call_id == "call_1" and tools == [RUN]
    assert model.remaining == 0


async def test_running_out_of_script_is_a_clear_model_error() -> None:
    model = ScriptedModel(["only turn"])
    await model.complete([Message("user", "hi")], [])
    with pytest.raises(ModelError, match="ran out of replies after 1") as caught:
        await model.complete([Message("user", "again")], [])
    assert caught.value.code == "script_exhausted"
    assert caught.value.provider == "scripted" and caught.value.status is None
    assert len(model.calls) == 2


async def test_extend_adds_turns() -> None:
    model = ScriptedModel()
    model.extend(["later"])
    assert (await model.complete([], [])).message.content == "later"


def test_script_holds_only_assistant_turns() -> None:
    with pytest.raises(ConfigError, match="assistant turns"):
        ScriptedModel([Message("user", "not mine")])


async def test_loads_json_lines_with_default_call_ids(tmp_path: Path) -> None:
    path = tmp_path / "fix.jsonl"
    turns = [
        {"content": "Look first.", "tool_calls": [{"name": "run", "arguments": {"command": "ls"}}]},
        {"tool_calls": [{"id": "mine", "name": "finish", "arguments": {"summary": "done"}}]},
        "Bye.",
    ]
    path.write_text("\n".join(json.dumps(t) for t in turns[:2]) + "\n\n" + json.dumps(turns[2]) + "\n")
    model = ScriptedModel.from_file(path)

    replies = [(await model.complete([], [])).message for _ in range(3)]

    assert model.name == f"scripted:{path}"
    assert replies[0] == Message("assistant", "Look first.", [ToolCall("call_1_1", "run", {"command": "ls"})])
    assert replies[1] == Message("assistant", "", [ToolCall("mine", "finish", {"summary": "done"})])
    assert replies[2] == Message("assistant", "Bye.")


async def test_loads_a_json_list(tmp_path: Path) -> None:
    path = tmp_path / "script.json"
    path.write_text(json.dumps([{"content": "one"}, {"content": "two"}], indent=2))
    model = ScriptedModel.from_file(path)
    assert [(await model.complete([], [])).message.content for _ in range(2)] == ["one", "two"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"content": "ok"}\n{not json\n', r"script\.jsonl:2: not valid JSON"),
        ("[1, 2", "not valid JSON"),
        ('{"content": "x", "extra": 1}\n', "only 'content' and 'tool_calls'"),
        ('{"tool_calls": [{"arguments": {}}]}\n', "string 'name'"),
        ('{"tool_calls": [{"name": "run", "arguments": "ls"}]}\n', "must be an object"),
    ],
)
def test_bad_script_files_are_config_errors(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "script.jsonl"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        ScriptedModel.from_file(path)


def test_missing_script_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read model script"):
        ScriptedModel.from_file(tmp_path / "absent.jsonl")
