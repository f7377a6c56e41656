"""The agent loop end to end: a scripted model working in a real sandbox."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from errand.agent import Agent, AgentConfig, AgentHooks, Budgets
from errand.errors import ConfigError
from errand.models import Message, ScriptedModel, ToolCall, Usage
from errand.sandbox import AsyncSandbox


def turn(*calls: tuple[str, dict[str, Any]], content: str = "") -> Message:
    return Message("assistant", content, [ToolCall(f"c{id(args)}_{n}", name, args)
                                          for n, (name, args) in enumerate(calls)])


READ = ("read_file", {"path": "calc.py"})
FIX = ("edit_file", {"path": "calc.py", "old": "return a - b", "new": "return a + b"})
TEST = ("shell", {"command": "python3 test_calc.py"})
FINISH = ("finish", {"summary": "add() subtracted; now it adds", "assumptions": ["add is for numbers"]})
WORKSPACE = AgentConfig(workdir="/workspace")


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    async def __call__(self, kind: str, data: dict[str, Any]) -> None:
        self.events.append((kind, data))

    @property
    def kinds(self) -> list[str]:
        return [kind for kind, _ in self.events]


def make_agent(model: ScriptedModel, sandbox: AsyncSandbox, **options: Any) -> tuple[Agent, Recorder]:
    recorder = Recorder()
    agent = Agent(model, sandbox, AgentConfig(workdir="/workspace", **options), AgentHooks(on_event=recorder))
    return agent, recorder


def seen(model: ScriptedModel, call: int) -> list[Message]:
    return model.calls[call][0]


async def test_fixes_the_bug_and_finishes(sandbox: AsyncSandbox) -> None:
    model = ScriptedModel([turn(READ), turn(FIX), turn(TEST), turn(FINISH)])
    agent, recorder = make_agent(model, sandbox, instructions="Run tests with python3 test_calc.py.")
    result = await agent.run("Make test_calc.py pass.")

    assert result.status == "finished"
    assert result.summary == "add() subtracted; now it adds"
    assert result.assumptions == ["add is for numbers"]
    assert "return a + b" in await sandbox.files.read_text("/workspace/calc.py")
    assert recorder.kinds == ["message", "message",
                              "model", "tool_call", "tool_result",
                              "model", "tool_call", "tool_result",
                              "model", "tool_call", "output", "tool_result",
                              "model", "tool_call", "exit"]
    output, test_result = recorder.events[10][1], recorder.events[11][1]
    assert output["text"] == "1 passed\n" and output["id"] == recorder.events[9][1]["id"]
    assert test_result["ok"] and test_result["content"] == "exit code 0\n1 passed\n"
    assert test_result["exit_code"] == 0
    assert [data["step"] for kind, data in recorder.events if kind == "model"] == [1, 2, 3, 4]
    system = seen(model, 0)[0]
    assert system.role == "system" and "Run tests with python3 test_calc.py." in system.content
    assert [t.name for t in model.calls[0][1]][-1] == "finish"
    assert result.messages == agent.messages and result.spent.steps == 4


async def test_each_step_is_reported_before_the_next_begins(sandbox: AsyncSandbox) -> None:
    model = ScriptedModel([turn(READ), turn(FINISH)])
    reported_before_query: list[int] = []
    agent = Agent(model, sandbox, WORKSPACE, AgentHooks(
        on_event=lambda kind, data: reported_before_query.append(len(model.calls)) if kind == "tool_result" else None))
    await agent.run("look")
    assert reported_before_query == [1]  # the read's result was reported before the second query


async def test_edit_errors_come_back_and_the_run_continues(sandbox: AsyncSandbox) -> None:
    missing = ("edit_file", {"path": "calc.py", "old": "return a * b", "new": "return a + b"})
    several = ("edit_file", {"path": "calc.py", "old": "return", "new": "return"})
    model = ScriptedModel([turn(missing), turn(several), turn(FIX), turn(FINISH)])
    agent, _ = make_agent(model, sandbox)
    result = await agent.run("fix add")

    assert result.status == "finished"
    assert "was not found in /workspace/calc.py" in seen(model, 1)[-1].content
    assert "was found 2 times in /workspace/calc.py" in seen(model, 2)[-1].content
    assert seen(model, 3)[-1].content.startswith("edited /workspace/calc.py")


async def test_ask_user_pauses_and_resume_gives_the_answer(sandbox: AsyncSandbox) -> None:
    ask = ("ask_user", {"question": "Should add() also join strings?"})
    model = ScriptedModel([turn(READ), turn(ask, READ), turn(FIX), turn(FINISH)])
    agent, recorder = make_agent(model, sandbox)
    paused = await agent.run("fix add")

    assert paused.status == "needs_input"
    assert paused.question == "Should add() also join strings?"
    assert recorder.kinds[-1] == "exit" and recorder.events[-1][1]["status"] == "needs_input"
    assert "return a - b" in await sandbox.files.read_text("/workspace/calc.py")  # asked before editing

    result = await agent.resume("No, numbers only.")
    assert result.status == "finished"
    after_answer = seen(model, 2)
    answer = next(m for m in after_answer if m.content == "The user answered: No, numbers only.")
    assert answer.role == "tool" and answer.tool_call_id == model.calls[2][0][4].tool_calls[0].id
    skipped = [m for m in after_answer if m.content.startswith("not run: the run paused")]
    assert len(skipped) == 1  # the read asked for alongside the question still gets a result
    with pytest.raises(ConfigError):
        await agent.resume("again")


async def test_a_message_mid_run_is_delivered_at_the_next_step(sandbox: AsyncSandbox) -> None:
    model = ScriptedModel([turn(READ), turn(FIX), turn(FINISH)])
    agent: Agent

    def on_event(kind: str, data: dict[str, Any]) -> None:
        kinds.append(kind)
        if kind == "tool_result" and data["step"] == 1:
            agent.send_message("Also keep double() as it is.")

    kinds: list[str] = []
    agent = Agent(model, sandbox, WORKSPACE, AgentHooks(on_event=on_event))
    result = await agent.run("fix add")

    assert result.status == "finished"
    assert "Message from the person who gave you this task: Also keep double() as it is." not in [
        m.content for m in seen(model, 0)]
    assert seen(model, 1)[-1] == Message(
        "user", "Message from the person who gave you this task: Also keep double() as it is.")
    assert kinds.index("message_delivered") == kinds.index("model", kinds.index("tool_result")) - 1


async def test_step_budget_ends_the_run(sandbox: AsyncSandbox) -> None:
    model = ScriptedModel([turn(("shell", {"command": f"echo {n}"})) for n in range(5)])
    agent, recorder = make_agent(model, sandbox, budgets=Budgets(max_steps=2))
    result = await agent.run("count")

    assert result.status == "budget_exhausted" and result.budget == "steps"
    assert "2 of 2 steps" in result.detail
    assert len(model.calls) == 2 and model.remaining == 3
    kind, data = recorder.events[-1]
    assert (kind, data.pop("spent")["steps"]) == ("exit", 2)
    assert data == {"step": 2, "status": "budget_exhausted", "detail": result.detail, "budget": "steps"}


async def test_token_budget_names_the_budget(sandbox: AsyncSandbox) -> None:
    class Wordy(ScriptedModel):
        async def complete(self, messages: Any, tools: Any) -> Any:
            reply = await super().complete(messages, tools)
            return replace(reply, usage=Usage(600, 500))

    model = Wordy([turn(READ), turn(TEST), turn(FINISH)])
    agent, _ = make_agent(model, sandbox, budgets=Budgets(max_tokens=2000))
    result = await agent.run("fix")
    assert (result.status, result.budget, result.spent.tokens) == ("budget_exhausted", "tokens", 2200)


async def test_the_same_call_three_times_is_stuck(sandbox: AsyncSandbox) -> None:
    model = ScriptedModel([turn(TEST), turn(TEST), turn(TEST), turn(FINISH)])
    agent, recorder = make_agent(model, sandbox)
    result = await agent.run("fix")

    assert result.status == "stuck"
    assert "3 times in a row" in result.detail and "python3 test_calc.py" in result.detail
    assert recorder.kinds.count("tool_result") == 2  # the third repeat is not run


async def test_a_model_error_ends_the_run(sandbox: AsyncSandbox) -> None:
    model = ScriptedModel([turn(READ)])
    agent, _ = make_agent(model, sandbox)
    result = await agent.run("fix")
    assert result.status == "error"
    assert result.detail.startswith("the model failed: scripted ran out of replies")


async def test_a_reply_without_tool_calls_is_nudged(sandbox: AsyncSandbox) -> None:
    model = ScriptedModel(["I think I am done.", turn(FINISH)])
    agent, _ = make_agent(model, sandbox)
    result = await agent.run("fix")
    assert result.status == "finished"
    assert seen(model, 1)[-1].role == "user" and "call finish" in seen(model, 1)[-1].content


async def test_bad_configuration_is_rejected(sandbox: AsyncSandbox) -> None:
    with pytest.raises(ConfigError):
        Budgets(max_steps=0)
    with pytest.raises(ConfigError):
        Budgets(max_cost=float("nan"))
    with pytest.raises(ConfigError):
        Budgets(max_repeats=1)
    with pytest.raises(ConfigError):
        AgentConfig(workdir="workspace")
    with pytest.raises(ConfigError):
        AgentConfig(workdir="/workspace", budgets={"max_steps": 3})  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        Agent(ScriptedModel(), sandbox, {"workdir": "/workspace"})  # type: ignore[arg-type]
    agent = Agent(ScriptedModel([turn(FINISH)]), sandbox, WORKSPACE)
    with pytest.raises(ConfigError):
        agent.send_message("  ")
    await agent.run("x")
    with pytest.raises(ConfigError):
        await agent.run("again")


class Notebook:
    """Memory hooks that keep proposals in a list."""

    def __init__(self) -> None:
        self.proposed: list[str] = []

    async def recall(self, query: str) -> str:
        return f"[m-1] (convention, from AGENTS.md) tests run with python3 test_calc.py — asked: {query}"

    async def remember(self, text: str) -> str:
        self.proposed.append(text)
        return "proposed as m-2; a person reviews it before it is used"


async def test_memory_tools_are_offered_only_with_hooks_and_reach_them(sandbox: AsyncSandbox) -> None:
    plain = ScriptedModel([turn(FINISH)])
    await Agent(plain, sandbox, WORKSPACE).run("fix add")
    assert "recall" not in [t.name for t in plain.calls[0][1]]

    notebook = Notebook()
    model = ScriptedModel([turn(("recall", {"query": "how to test"}), ("remember", {"text": "calc has no deps"})),
                           turn(("remember", {"text": ""})), turn(FINISH)])
    agent = Agent(model, sandbox, AgentConfig(workdir="/workspace", memories="[m-7] (pitfall) add() once subtracted"),
                  AgentHooks(memory=notebook))
    result = await agent.run("fix add")
    assert result.status == "finished"
    assert {"recall", "remember"} <= {t.name for t in model.calls[0][1]}
    system = seen(model, 0)[0].content
    assert "<memories>\n[m-7] (pitfall) add() once subtracted\n</memories>" in system
    answers = [m.content for m in seen(model, 1) if m.role == "tool"]
    assert answers[0].startswith("[m-1] (convention, from AGENTS.md)") and "how to test" in answers[0]
    assert answers[1].startswith("proposed as m-2")
    assert notebook.proposed == ["calc has no deps"]
    assert seen(model, 2)[-1].content == "error: remember: 'text' must be a non-empty string"


async def test_file_notes_follow_the_result_of_a_tool_that_opened_or_changed_a_file(sandbox: AsyncSandbox) -> None:
    asked: list[str] = []

    async def notes(path: str) -> str:
        asked.append(path)
        return f"[rules for {path}]" if path == "calc.py" else ""

    model = ScriptedModel([turn(("read_file", {"path": "/workspace/calc.py"})), turn(FIX),
                           turn(("read_file", {"path": "missing.py"})), turn(("search", {"pattern": "add"})),
                           turn(("write_file", {"path": "notes/todo.txt", "content": "x"})),
                           turn(("read_file", {"path": "../etc/passwd"})), turn(FINISH)])
    result = await Agent(model, sandbox, WORKSPACE, AgentHooks(file_notes=notes)).run("fix add")
    assert result.status == "finished"
    read, edited, missing, searched, wrote, outside = [m.content for m in result.messages if m.role == "tool"][:6]
    assert read.endswith("\n\n[rules for calc.py]") and read.startswith("/workspace/calc.py (")
    assert edited.endswith("[rules for calc.py]")
    assert missing.startswith("error:") and "rules" not in missing and "rules" not in searched
    assert asked == ["calc.py", "calc.py", "notes/todo.txt"]  # a failed call, a search and a path outside: none
    assert "rules" not in wrote + outside
