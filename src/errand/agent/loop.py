"""The agent loop: run → step → query → execute, until something ends the run.

The loop is short and linear on purpose (after mini-swe-agent's
``DefaultAgent``): all variation lives in the injected :class:`~errand.models.Model`,
the :class:`~errand.agent.workspace.Workspace` its tools act in (a task's
sandbox), its :class:`~errand.agent.config.AgentConfig` and its
:class:`~errand.agent.config.AgentHooks`. Every tool call, errand's own or a
memory tool, is answered by one :class:`~errand.agent.registry.ToolRegistry`.
:attr:`Agent.messages` *is* the trajectory. Every step is reported through
``on_event`` before the next step begins, so a store that saves events loses
nothing when a worker dies. Each way a run ends is an exception from :mod:`errand.agent.exits` that carries its
exit status; :meth:`Agent.run` turns it into an :class:`AgentResult`.

Asking the model — its window, the provider's failures — is
:class:`~errand.agent.asking.Asker`'s; a tool call that cannot run as written is
answered with what was wrong (:mod:`errand.agent.calls`), and only a run of
such replies ends the run.

Events (``on_event(kind, data)``; every ``data`` has ``step``): ``message``,
``message_delivered``, ``model`` (the reply, its tokens split into cached and
not, its ``cost`` and the run's totals so far ``run_tokens`` and ``run_cost``),
``tool_call`` (``malformed`` says why one was not run), ``output``,
``tool_result``, ``model_retry``, ``condensed``, and ``exit`` (with ``spent``).
"""

from __future__ import annotations

import posixpath
from dataclasses import asdict, replace
from typing import Any

from errand.agent.asking import Asker
from errand.agent.budgets import Spent
from errand.agent.calls import problem_with
from errand.agent.config import AgentConfig, AgentHooks
from errand.agent.context import Context
from errand.agent.exits import BudgetExhausted, Finished, NeedsInput, RunEnded, RunFailed
from errand.agent.memory_tools import register_memory_tools
from errand.agent.progress import EventHandler, Repeats, RunClock, emit
from errand.agent.prompt import system_prompt
from errand.agent.registry import ToolRegistry, ToolResult
from errand.agent.result import AgentResult
from errand.agent.retry import SystemClock
from errand.agent.tools import register_core_tools
from errand.agent.transcript import message_from_json, message_to_json
from errand.agent.workspace import Workspace
from errand.errors import ConfigError, SandboxNotFound, SandboxTerminated
from errand.models import Message, Model, Reply, ToolCall
from errand.models.profiles import ModelProfile

__all__ = ["FILE_TOOLS", "Agent", "AgentResult", "EventHandler"]  # AgentResult: errand.agent.result's

#: The tools whose ``path`` is a file the model is looking at or changing.
FILE_TOOLS = frozenset({"read_file", "edit_file", "write_file"})

_NUDGE = ("Reply with tool calls: keep working with the tools, call ask_user if you need an answer "
          "from the person, or call finish when the task is done.")
_NOT_RUN = "not run: the run paused for the user's answer first; call it again if you still need it"


class Agent:
    """A coding agent: a model that works in a workspace (a sandbox) through tools, within budgets."""

    def __init__(self, model: Model, workspace: Workspace, config: AgentConfig,
                 hooks: AgentHooks | None = None) -> None:
        """An agent of ``model`` whose tools act in ``workspace`` (a task's sandbox), as ``config``
        says, calling out to ``hooks``."""
        if not isinstance(config, AgentConfig):
            raise ConfigError(f"config must be an AgentConfig, not {config!r}", code="invalid_config")
        hooks = hooks or AgentHooks()
        self.model = model
        self.workspace = workspace
        self.config = config
        self.hooks = hooks
        self.registry = ToolRegistry()
        register_core_tools(self.registry, workspace, config.workdir)
        if hooks.memory is not None:
            register_memory_tools(self.registry, hooks.memory)
        self.tools = list(self.registry.schemas)
        self.messages: list[Message] = []
        self.spent = Spent()
        self.clock = hooks.clock or SystemClock()
        profile: ModelProfile = getattr(model, "profile", None) or ModelProfile()
        self.context = Context(profile.context_window, config.context)
        self.asker = Asker(model, self.context, config.retry, self.clock, self._emit, self.spent,
                           self._seconds_left)
        self._malformed = 0  # replies in a row with no tool call that could run
        self._inbox: list[tuple[str, Any]] = []
        self._waiting: NeedsInput | None = None
        self._repeats = Repeats()
        self._watch = RunClock(self.clock)

    # ------------------------------------------------------------ public API

    async def run(self, task: str) -> AgentResult:
        """Work on ``task`` until the run finishes, needs input, or is stopped."""
        if self.messages:
            raise ConfigError("this agent has already run; use resume(answer) to continue it", code="already_run")
        config = self.config
        await self._add(Message("system", system_prompt(config.workdir, config.instructions, config.memories,
                                                        memory_tools=self.hooks.memory is not None)))
        await self._add(Message("user", task))
        return await self._loop()

    async def resume(self, answer: str) -> AgentResult:
        """Continue a run that stopped with ``needs_input``, giving the model ``answer``."""
        if self._waiting is None:
            raise ConfigError("the agent is not waiting for an answer; only a needs_input run resumes",
                              code="not_waiting")
        call_id, self._waiting = self._waiting.call_id, None
        await self._add(Message("tool", f"The user answered: {answer}", tool_call_id=call_id))
        return await self._loop()

    def send_message(self, text: str, *, ref: Any = None) -> None:
        """Queue a person's message; it is delivered to the model at the next step.

        The ``message_delivered`` event then carries ``ref`` (say, the id of the
        stored message), so whoever sent it can show it as delivered.
        """
        if not isinstance(text, str) or not text.strip():
            raise ConfigError("a message needs some text", code="empty_message")
        self._inbox.append((text, ref))

    def suspended(self) -> dict[str, Any]:
        """The run paused on a question, as plain values another process can :meth:`restore`
        (messages not yet delivered are not in it: whoever sent them sends them again)."""
        if self._waiting is None:
            raise ConfigError("only a run paused on a question can be suspended", code="not_waiting")
        return {"messages": [message_to_json(m) for m in self.messages], "spent": asdict(self.spent),
                "question": self._waiting.question, "call_id": self._waiting.call_id,
                "seconds": self._watch.before, "last_call": list(self._repeats.last)}

    def restore(self, saved: dict[str, Any]) -> None:
        """Continue, in this agent, a run another agent :meth:`suspended`: :meth:`resume` is next."""
        if self.messages:
            raise ConfigError("this agent has already run; restore into a new one", code="already_run")
        self.messages = [message_from_json(m) for m in saved["messages"]]
        for name, value in saved["spent"].items():  # in place: the asker counts into this very object
            setattr(self.spent, name, value)
        self._waiting = NeedsInput(str(saved["question"]), str(saved["call_id"]))
        self._watch.before = float(saved.get("seconds") or 0.0)
        signature, count = saved.get("last_call") or ("", 0)
        self._repeats.last = (str(signature), int(count))

    @property
    def waiting(self) -> bool:
        """Whether the run is paused on a question (``needs_input``) until :meth:`resume`."""
        return self._waiting is not None

    # ------------------------------------------------------------ the loop

    async def _loop(self) -> AgentResult:
        self._watch.start()
        try:
            while True:
                await self.step()
        except RunEnded as end:
            result = self._result(end)
        finally:
            self._watch.stop()
        await self._emit("exit", {"status": result.status, "detail": result.detail, "budget": result.budget,
                                  "spent": result.spent.to_json()})
        return result

    async def step(self) -> None:
        """Deliver queued messages, query the model, execute each tool call it asks for, in order."""
        self.spent.seconds = self._seconds()
        self.spent.check(self.config.budgets)
        await self._deliver_messages()
        reply = await self.query()
        calls = reply.message.tool_calls
        if not calls:
            await self._add(Message("user", _NUDGE))
            self._count_malformed("a reply with no tool call")
            return
        problems = [problem_with(call, self.tools) for call in calls]
        for index, (call, problem) in enumerate(zip(calls, problems, strict=True)):
            try:
                if problem is None:
                    await self.execute(call)
                else:
                    await self._refuse(call, problem)
            except NeedsInput as pause:
                self._waiting = pause
                for skipped in calls[index + 1:]:
                    await self._add_result(skipped, ToolResult(_NOT_RUN, ok=False))
                raise
        if all(problems):
            self._count_malformed(next(p for p in problems if p))
        else:
            self._malformed = 0

    async def query(self) -> Reply:
        reply = await self.asker.ask(self.messages, self.tools)
        self.spent.steps += 1
        self.spent.add(reply.usage, reply.cost)
        self.messages.append(reply.message)
        usage = reply.usage
        await self._emit("model", {
            "content": reply.message.content, "tool_calls": [_call_data(c) for c in reply.message.tool_calls],
            "input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens,
            "cache_read_tokens": usage.cache_read_tokens, "cache_write_tokens": usage.cache_write_tokens,
            "cost": reply.cost, "stop": reply.raw_stop, "run_tokens": self.spent.tokens,
            "run_cost": self.spent.cost})
        return reply

    async def execute(self, call: ToolCall) -> None:
        self._repeats.check(call.name, call.arguments, self.config.budgets.max_repeats)
        await self._emit("tool_call", _call_data(call))
        try:
            result = await self.registry.run(call, on_output=lambda text: self._emit("output",
                                                                                     {"id": call.id, "text": text}))
        except (SandboxTerminated, SandboxNotFound) as error:
            by = error.terminated_by if isinstance(error, SandboxTerminated) else None
            if by is not None:
                raise RunFailed(f"the sandbox was terminated by a person ({by}) while the agent worked") from error
            raise RunFailed(f"the sandbox is gone: {error.message}") from error
        await self._add_result(call, await self._with_notes(call, result))

    async def _with_notes(self, call: ToolCall, result: ToolResult) -> ToolResult:
        """``result`` with what ``file_notes`` says about the file the call opened or changed."""
        path, file_notes = call.arguments.get("path"), self.hooks.file_notes
        if file_notes is None or not result.ok or call.name not in FILE_TOOLS or not isinstance(path, str):
            return result
        workdir = self.config.workdir
        relative = posixpath.relpath(posixpath.normpath(posixpath.join(workdir, path)), workdir)
        if relative == "." or relative.startswith("../"):
            return result
        notes = await file_notes(relative)
        return replace(result, content=f"{result.content}\n\n{notes}") if notes else result

    async def _refuse(self, call: ToolCall, problem: str) -> None:
        """Answer a call that cannot run with what was wrong, so the model can correct it."""
        await self._emit("tool_call", {**_call_data(call), "malformed": problem})
        await self._add_result(call, ToolResult(problem, ok=False))

    def _count_malformed(self, problem: str) -> None:
        self._malformed += 1
        if self._malformed >= self.config.budgets.max_malformed:
            raise RunFailed(f"the model's last {self._malformed} replies held no tool call that could run; "
                            f"the last: {problem}")

    # ------------------------------------------------------------ helpers

    async def _deliver_messages(self) -> None:
        while self._inbox:
            text, ref = self._inbox.pop(0)
            self.messages.append(Message("user", f"Message from the person who gave you this task: {text}"))
            await self._emit("message_delivered", {"text": text, "ref": ref})

    async def _add(self, message: Message) -> None:
        self.messages.append(message)
        await self._emit("message", {"role": message.role, "content": message.content,
                                     "tool_call_id": message.tool_call_id})

    async def _add_result(self, call: ToolCall, result: ToolResult) -> None:
        self.messages.append(Message("tool", result.content, tool_call_id=call.id))
        await self._emit("tool_result", {"id": call.id, "name": call.name, "ok": result.ok,
                                         "exit_code": result.exit_code, "content": result.content})

    async def _emit(self, kind: str, data: dict[str, Any]) -> None:
        await emit(self.hooks.on_event, self.spent.steps, kind, data)

    def _seconds(self) -> float:
        return self._watch.seconds()

    def _seconds_left(self) -> float | None:
        return self._watch.left(self.config.budgets.max_seconds)

    def _result(self, end: RunEnded) -> AgentResult:
        self.spent.seconds = self._seconds()
        return AgentResult(
            status=end.status, detail=end.detail, messages=list(self.messages), spent=replace(self.spent),
            summary=end.summary if isinstance(end, Finished) else None,
            assumptions=end.assumptions if isinstance(end, Finished) else [],
            question=end.question if isinstance(end, NeedsInput) else None,
            budget=end.budget if isinstance(end, BudgetExhausted) else None,
            answer=end.answer if isinstance(end, Finished) else None)


def _call_data(call: ToolCall) -> dict[str, Any]:
    data: dict[str, Any] = {"id": call.id, "name": call.name, "arguments": call.arguments}
    if call.malformed is not None:
        data["malformed"] = call.malformed
    return data
