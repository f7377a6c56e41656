"""The memory tools as registered for a run: arguments checked before the hooks are asked, and an
answer of the hooks that says ``error:`` given back as a failed tool call."""

from __future__ import annotations

import pytest

from errand.agent.memory_tools import MAX_REMEMBER_CHARS, MEMORY_TOOLS, register_memory_tools, run_memory_tool
from errand.agent.registry import ToolRegistry, ToolResult
from errand.models import ToolCall


class Notebook:
    """Memory hooks that keep what they were asked."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.proposed: list[str] = []

    async def recall(self, query: str) -> str:
        self.asked.append(query)
        return f"[m-1] (fact) about {query}"

    async def remember(self, text: str) -> str:
        self.proposed.append(text)
        return "error: that repeats m-1" if "again" in text else "proposed as m-2"


async def test_recall_and_remember_reach_the_hooks() -> None:
    notebook = Notebook()
    assert await run_memory_tool(notebook, ToolCall("c1", "recall", {"query": "tests"})) == ToolResult(
        "[m-1] (fact) about tests")
    assert await run_memory_tool(notebook, ToolCall("c2", "remember", {"text": "uses tabs"})) == ToolResult(
        "proposed as m-2")
    assert (notebook.asked, notebook.proposed) == (["tests"], ["uses tabs"])


async def test_an_answer_that_says_error_is_a_failed_call() -> None:
    answer = await run_memory_tool(Notebook(), ToolCall("c1", "remember", {"text": "uses tabs again"}))
    assert answer == ToolResult("error: that repeats m-1", ok=False)


@pytest.mark.parametrize(("name", "arguments", "said"), [
    ("recall", {"query": "  \n"}, "error: recall: 'query' must be a non-empty string"),
    ("recall", {"query": 7}, "error: recall: 'query' must be a non-empty string"),
    ("remember", {"text": ""}, "error: remember: 'text' must be a non-empty string"),
    ("remember", {"text": "x" * (MAX_REMEMBER_CHARS + 1)}, "error: remember: keep a memory under 2000 characters"),
])
async def test_bad_arguments_are_answered_and_the_hooks_never_asked(name: str, arguments: dict[str, object],
                                                                    said: str) -> None:
    notebook = Notebook()
    answer = await run_memory_tool(notebook, ToolCall("c1", name, arguments))
    assert not answer.ok and answer.content.startswith(said)
    assert notebook.asked == notebook.proposed == []


async def test_a_memory_of_exactly_the_limit_is_proposed() -> None:
    notebook = Notebook()
    assert (await run_memory_tool(notebook, ToolCall("c1", "remember", {"text": "x" * MAX_REMEMBER_CHARS}))).ok
    assert notebook.proposed == ["x" * MAX_REMEMBER_CHARS]


def test_the_two_tools_are_registered_with_schemas_that_forbid_other_fields() -> None:
    registry = ToolRegistry()
    register_memory_tools(registry, Notebook())
    assert list(registry.schemas) == list(MEMORY_TOOLS)
    assert [tool.name for tool in MEMORY_TOOLS] == ["recall", "remember"]
    assert all(tool.parameters["additionalProperties"] is False for tool in MEMORY_TOOLS)
