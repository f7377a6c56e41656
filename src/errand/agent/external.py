"""An agent CLI run in the task's sandbox, behind the same seam as errand's own loop.

The CLI (Claude Code, …) is installed into an image layer of its own, cached and
stacked onto the task's set-up image (:meth:`~errand.agent.cli.CliAdapter.install`), and started over
the working copy with its machine-readable stream on stdout. Each line of it is
translated (by the adapter, a pure function of the line: :meth:`CliAdapter.translate`)
into what errand's loop reports — ``model`` with its tokens and cost, ``tool_call``,
``output``, ``tool_result`` — through the same event handler, so the log, the step,
token, cost and time budgets, stuck detection, progress and cost work as for
errand's own agent. A budget spent, the same tool call too often in a row, a CLI
that prints nothing for too long or exits without its result: each ends the run
with its reason, and the CLI's processes are killed before :meth:`CliAgent.run` returns.

The CLI holds no model key: it is given a :class:`ModelAccess` — a base URL and a
per-task token — by whoever runs the round (the host's model gateway swaps the
token for the key). The task's instructions, memories and rules reach it through
its prompt flags or its configuration files, never through a file in the working copy.

errand's own tools reach it over MCP (:mod:`errand.agent.mcp_server`): the access's
``tools`` name the run's MCP server, which each adapter writes into the CLI's MCP
configuration. A question the CLI asks there (``ask_person``) stops the run with
``needs_input`` once the CLI's turn is over; :meth:`CliAgent.resume` gives it the
answer in the same session (``--resume``, ``exec resume``). A run whose sandbox
ends while it waits (:meth:`CliAgent.keep_session` first takes the CLI's session
files out of it: the adapter's ``home``) has them put back in its next sandbox
and resumes the same way; one whose session files could not be kept starts a
new session, told the task, its earlier session's transcript summarised, the
question and the answer, over the same working copy.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import os
from dataclasses import asdict, replace
from typing import Any, Protocol

from errand.agent.budgets import Budgets, Spent
from errand.agent.cli import CliAdapter, ModelAccess, Said, ToolAccess
from errand.agent.context import render_for_summary
from errand.agent.exits import BudgetExhausted, NeedsInput, RunEnded, RunFailed
from errand.agent.loop import AgentResult
from errand.agent.mcp_server import Desk
from errand.agent.progress import EventHandler, Repeats, RunClock, emit
from errand.agent.transcript import message_from_json, message_to_json
from errand.errors import ConfigError, ErrandError
from errand.models import Message, ToolCall, Usage
from errand.models.profiles import ModelProfile
from errand.sandbox import AsyncSandbox, Image

__all__ = ["CliAdapter", "CliAgent", "Gateway", "ModelAccess", "Said", "ToolAccess", "with_layer"]

#: Seconds a CLI may print nothing before it is taken for hung (the run's time budget, if shorter, wins);
#: a worker sets its own with ``ERRAND_CLI_QUIET_SECONDS``.
QUIET_SECONDS = 600.0
_STDERR_TAIL = 2000
_RETOLD_CHARS = 12_000  # of an earlier session's transcript, retold to a new one
_KEPT_BYTES = 16 << 20  # the most of a CLI's session files kept while a run waits (more: it is retold)
_KEPT_AT = "/tmp/errand-cli-session.tgz"


class Gateway(Protocol):
    """The host's model gateway, as a round sees it: a grant per run (``endpoint`` the task's
    :class:`~errand.models.ModelEndpoint`, spoken to on the wire ``protocol``, stopped at
    ``budgets``), revoked when it ends; closed with the worker."""

    async def grant(self, run_id: str, endpoint: Any, budgets: Budgets, protocol: str,
                    desk: Desk | None = None) -> ModelAccess:
        """The run's access; with ``desk``, errand's tools over MCP on it too (``ModelAccess.tools``)."""
        ...

    async def revoke(self, run_id: str) -> tuple[Usage, float] | None:
        """End the grant; what it metered (tokens, dollars), which may be more than the CLI's stream
        told (a CLI's side calls, a title, a summary, are no step of its stream)."""
        ...

    async def close(self) -> None: ...


async def with_layer(image: Image, adapter: CliAdapter) -> Image:
    """``image`` with the adapter's CLI on top: its install, built once on the base image into a
    cached layer (the only step that reaches a registry, npm's, while it runs), and its
    ``bin`` first on PATH."""
    installed = await adapter.install().build_async()
    base = image.config if image.config is not None else await image.build_async()
    layer = installed.layers[-1]
    env = dict(base.env)
    env["PATH"] = f"{adapter.prefix}/bin:{env.get('PATH', '/usr/bin:/bin')}"
    key = hashlib.sha256(f"{base.key}\0{layer}\0{adapter.prefix}".encode()).hexdigest()[:32]
    return Image.from_config(replace(base, key=f"agent-{key}", layers=(*base.layers, layer), env=tuple(env.items())))


class CliAgent:
    """A task's agent that is a CLI in its sandbox (see the module's docstring)."""

    def __init__(self, adapter: CliAdapter, sandbox: AsyncSandbox, access: ModelAccess, *, workdir: str,
                 budgets: Budgets | None = None, on_event: EventHandler | None = None,
                 instructions: str | None = None, memories: str | None = None,
                 profile: ModelProfile | None = None, quiet_seconds: float | None = None,
                 desk: Desk | None = None) -> None:
        """``desk`` is the run's side of errand's tools (the one its ``access.tools`` reach), where a
        question it asks waits for the run to take it."""
        if not isinstance(workdir, str) or not workdir.startswith("/"):
            raise ConfigError(f"workdir must be an absolute path inside the sandbox, not {workdir!r}")
        self.adapter = adapter
        self.sandbox = sandbox
        self.access = access
        self.workdir = workdir
        self.budgets = budgets or Budgets()
        self.instructions = instructions
        self.memories = memories
        self.profile = profile or ModelProfile()
        self.quiet_seconds = quiet_from_environment() if quiet_seconds is None else quiet_seconds
        self.messages: list[Message] = []
        self.spent = Spent()
        self.session: str | None = None
        self.desk = desk
        self._on_event = on_event
        self._waiting: str | None = None  # the question the run stopped on
        self._retell = False  # restored: the CLI's session is gone, a new one is told the story
        self._kept: str | None = None  # the CLI's session files (a gzipped tar, base64) while the run waits
        self._inbox: list[tuple[str, Any]] = []
        self._calls: set[str] = set()  # the model calls counted (a call's blocks may come on several lines)
        self._repeats = Repeats()
        self._watch = RunClock()
        self._invocations = 0

    # ------------------------------------------------------------ the seam

    async def run(self, task: str) -> AgentResult:
        if self.messages:
            raise ConfigError("this agent has already run", code="already_run")
        system = self.system_prompt()
        await self._add(Message("system", system))
        await self._add(Message("user", task))
        return await self._turns(task)

    async def resume(self, answer: str) -> AgentResult:
        """Continue a run that stopped on its question (``needs_input``), giving the CLI ``answer``:
        in its session, or (restored, its session gone) in a new one told what came before."""
        if self._waiting is None:
            raise ConfigError(f"this {self.adapter.kind} run is not waiting for an answer; only a needs_input "
                              "run resumes", code="not_waiting")
        question, self._waiting = self._waiting, None
        prompt = f"The person who gave you this task answered your question ({question}):\n\n{answer}"
        await self._add(Message("user", prompt))
        if self._kept is not None:
            self._retell = not await self._put_back()
        if self._retell or self.session is None:  # a CLI with no session to resume (mini-swe-agent) is retold
            self._retell, self.session = False, None
            prompt = self._retold(prompt)
        return await self._turns(prompt)

    async def keep_session(self) -> None:
        """Take the CLI's session files (its adapter's ``home``) out of the sandbox before it ends
        while the run waits, for :meth:`resume` to put back in the next (bounded: more is retold)."""
        home = getattr(self.adapter, "home", None)
        if self._waiting is None or self.session is None or not home:
            return
        env = self.adapter.env(self.access)
        with contextlib.suppress(ErrandError):
            packed = await self.sandbox.exec("sh", "-c", f'tar -czf {_KEPT_AT} -C "{home}" .', env=env)
            if (await packed.result()).exit_code == 0:
                data = await self.sandbox.files.read(_KEPT_AT, max_bytes=_KEPT_BYTES)
                self._kept = base64.b64encode(data).decode()

    async def _put_back(self) -> bool:
        """The kept session files, in this sandbox: whether they are (else the session is retold)."""
        kept, self._kept = self._kept, None
        home = getattr(self.adapter, "home", None)
        if kept is None or not home:
            return False
        try:
            await self.sandbox.files.write(_KEPT_AT, base64.b64decode(kept))
            unpacked = await self.sandbox.exec("sh", "-c", f'mkdir -p "{home}" && tar -xzf {_KEPT_AT} -C "{home}"',
                                               env=self.adapter.env(self.access))
            return (await unpacked.result()).exit_code == 0
        except (ErrandError, ValueError):
            return False

    async def _turns(self, prompt: str | None) -> AgentResult:
        """Invoke the CLI with ``prompt``, then with the people's messages that came meanwhile, until
        its turn ends with nothing more to say to it, or with a question it asked errand's tools."""
        system = self.system_prompt()
        self._watch.start()
        try:
            while prompt is not None:
                said = await self._invoke(prompt, system)
                self._check_question(said)
                prompt = await self._next_prompt()
            result = self._finished(said)
        except RunEnded as end:
            result = self._ended(end)
        finally:
            self._watch.stop()
        await self._emit("exit", {"status": result.status, "detail": result.detail, "budget": result.budget,
                                  "spent": result.spent.to_json()})
        return result

    def _check_question(self, said: Said) -> None:
        """A question the CLI asked (``ask_person``) during a turn that ended well stops the run on it."""
        question = self.desk.take_question() if self.desk is not None else None
        if question is not None and said.data.get("ok"):
            self._waiting = question
            raise NeedsInput(question, "")

    def _retold(self, answered: str) -> str:
        """The prompt of a new session, for a run whose CLI session is gone: the task, what the
        earlier session did (its transcript, summarised), and the answer to its question."""
        task = next((m.content for m in self.messages if m.role == "user"), "")
        earlier = render_for_summary(None, self.messages[2:-1], _RETOLD_CHARS)
        return (f"{task}\n\n# Your earlier session on this task\n\nYou worked on this task before, in a "
                "session that has ended; the working copy holds the changes you made. Its transcript, "
                f"summarised:\n\n{earlier}\n\n# The answer to your question\n\n{answered}\n\nContinue the task.")

    def send_message(self, text: str, *, ref: Any = None) -> None:
        """Queue a person's message: the CLI reads no input while it works, so it gets it when
        its turn ends, in the same session."""
        if not isinstance(text, str) or not text.strip():
            raise ConfigError("a message needs some text", code="empty_message")
        self._inbox.append((text, ref))

    def suspended(self) -> dict[str, Any]:
        """The run paused on a question, as plain values another process can :meth:`restore`."""
        if self._waiting is None:
            raise ConfigError("only a run paused on a question can be suspended", code="not_waiting")
        return {"messages": [message_to_json(m) for m in self.messages], "spent": asdict(self.spent),
                "question": self._waiting, "seconds": self._watch.before, "kind": self.adapter.kind,
                "session": self.session, "kept": self._kept}

    def restore(self, saved: dict[str, Any]) -> None:
        """Continue here a run another agent :meth:`suspended`: :meth:`resume` is next. Its CLI
        session was in the sandbox that ended: :meth:`resume` puts its kept files back and resumes
        it, or, none kept, starts a new one (:meth:`_retold`)."""
        if self.messages:
            raise ConfigError("this agent has already run; restore into a new one", code="already_run")
        if saved.get("kind") != self.adapter.kind:
            raise ConfigError(f"a {saved.get('kind')} run cannot be restored into {self.adapter.kind}",
                              code="not_waiting")
        self.messages = [message_from_json(m) for m in saved["messages"]]
        for name, value in saved["spent"].items():
            setattr(self.spent, name, value)
        self._waiting = str(saved["question"])
        self._watch.before = float(saved.get("seconds") or 0.0)
        session, kept = saved.get("session"), saved.get("kept")
        self.session = str(session) if session and kept else None
        self._kept = str(kept) if session and kept else None
        self._retell = True

    def system_prompt(self) -> str:
        """What errand adds to the CLI's own system prompt: the project's instructions, the memories
        recalled for the task, and how to end (a summary, then the assumptions made)."""
        parts = ["You are working on a task errand gave you, in a sandbox over a working copy of the repository "
                 f"at {self.workdir}. Your changes are reviewed by a person as a diff: change only what the task "
                 "needs, and run the project's tests. When you are done, end your last message with a short "
                 "summary of what you changed and how you checked it, then a line `Assumptions:` followed by one "
                 "`- ` line for each decision you made that the task did not settle (none: `- none`)."]
        if self.access.tools is not None:  # over MCP, or (a CLI with no MCP client) as the adapter says
            parts.append(getattr(self.adapter, "tools_guide", None) or (
                "errand's own tools are on its MCP server `errand`: `ask_person` when you need an answer "
                "only the person can give (then end your turn; the answer comes as your next message), "
                "`recall` to search what errand remembers of this project, `propose_memory` to propose "
                "a lasting fact for later tasks (a person approves it first)."))
        if self.instructions:
            parts.append("# The project's instructions\n\n" + self.instructions)
        if self.memories:
            parts.append("# What errand remembers of this project\n\n" + self.memories)
        return "\n\n".join(parts)

    # ------------------------------------------------------------ one invocation of the CLI

    async def _invoke(self, prompt: str, system: str) -> Said:
        self._invocations += 1
        argv = self.adapter.argv(prompt, system, self.access, self.session)
        for path, text in self.adapter.files(self.access, system).items():
            await self.sandbox.files.write(path, text, mode=0o600)
        process = await self.sandbox.exec(*argv, cwd=self.workdir, env=self.adapter.env(self.access))
        await process.stdin.close()
        errors = bytearray()
        drain = asyncio.ensure_future(_tail(process.stderr, errors))
        lines = aiter(process.stdout)
        result: Said | None = None
        before = replace(self.spent)
        try:
            while result is None:
                line = await self._next_line(lines)
                if line is None:
                    break
                for said in self.adapter.translate(line):
                    result = await self._apply(said) or result
            if result is None:
                code = await process.wait()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(asyncio.shield(drain), 5)
                said_last = errors.decode(errors="replace").strip()[-_STDERR_TAIL:]
                raise RunFailed(f"{self.adapter.kind} exited with code {code} before it gave a result"
                                + (f": {said_last}" if said_last else ""))
            self._settle(before, result.data.get("usage"))
            return result
        finally:
            await _stop(process)
            drain.cancel()

    async def _next_line(self, lines: Any) -> dict[str, Any] | None:
        """The stream's next JSON object; None at its end. Waits no longer than the CLI may be quiet."""
        while True:
            left = self._seconds_left()
            wait = self.quiet_seconds if left is None else max(min(self.quiet_seconds, left), 0.0)
            try:
                raw = await asyncio.wait_for(anext(lines), wait)
            except StopAsyncIteration:
                return None
            except TimeoutError:
                self.spent.seconds = self._seconds()
                quiet = f"{self.adapter.kind} had printed nothing for {wait:.0f}s, and was stopped"
                if left is not None and wait >= left:
                    raise BudgetExhausted(f"time budget used up ({self.spent.seconds:.1f}s of "
                                          f"{self.budgets.max_seconds:g}s): {quiet}", "seconds") from None
                raise RunFailed(f"{quiet} (taken for hung)") from None
            text = raw.decode(errors="replace") if isinstance(raw, bytes) else raw
            try:
                line = json.loads(text)
            except ValueError:
                continue  # not a line of its stream (a warning it printed)
            if isinstance(line, dict):
                return line

    async def _apply(self, said: Said) -> Said | None:
        if said.kind == "model":
            await self._model(said)
        elif said.kind == "tool_call":
            self._repeats.check(said.data.get("name"), said.data.get("arguments"), self.budgets.max_repeats)
            await self._emit("tool_call", said.data)
        elif said.kind == "tool_result":
            self.messages.append(Message("tool", str(said.data.get("content") or ""),
                                         tool_call_id=said.data.get("id")))
            await self._emit("tool_result", said.data)
        elif said.kind == "output":
            await self._emit("output", said.data)
        elif said.kind == "session":
            self.session = str(said.data.get("id") or "") or self.session
        elif said.kind == "result":
            return said
        return None

    async def _model(self, said: Said) -> None:
        """A model call: counted once (its blocks may come on several lines), checked against the budgets."""
        # A call is of one invocation: a CLI may number its items afresh in each (Codex's item_0, …).
        call_id = f"{self._invocations}:{said.data.get('call_id') or ''}"
        content = str(said.data.get("content") or "")
        calls = [ToolCall(str(c["id"]), str(c["name"]), dict(c.get("arguments") or {}))
                 for c in said.data.get("tool_calls") or ()]
        first = call_id not in self._calls
        if first:
            self._calls.add(call_id)
            self.spent.seconds = self._seconds()
            self.spent.check(self.budgets)
            self.spent.steps += 1
        usage = said.usage if first and said.usage is not None else Usage()
        cost = self.profile.cost(usage) if first else 0.0
        if first:
            self.spent.add(usage, cost)
        self.messages.append(Message("assistant", content, calls))
        await self._emit("model", {
            "content": content, "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in calls],
            "input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens,
            "cache_read_tokens": usage.cache_read_tokens, "cache_write_tokens": usage.cache_write_tokens,
            "cost": cost, "stop": said.data.get("stop"), "run_tokens": self.spent.tokens, "run_cost": self.spent.cost})

    def _settle(self, before: Spent, total: object) -> None:
        """Count what the CLI's own total for the invocation says beyond the calls' lines (a
        stream gives each call's usage as it began: its output tokens come only in the total)."""
        if not isinstance(total, Usage):
            return
        counted = Usage(self.spent.input_tokens - before.input_tokens, self.spent.output_tokens - before.output_tokens,
                        self.spent.cache_read_tokens - before.cache_read_tokens,
                        self.spent.cache_write_tokens - before.cache_write_tokens)
        more = Usage(max(total.input_tokens - counted.input_tokens, 0),
                     max(total.output_tokens - counted.output_tokens, 0),
                     max(total.cache_read_tokens - counted.cache_read_tokens, 0),
                     max(total.cache_write_tokens - counted.cache_write_tokens, 0))
        if more.input_tokens or more.output_tokens:
            cost = self.profile.cost(more)
            self.spent.add(more, cost or 0.0)

    async def _next_prompt(self) -> str | None:
        """The people's messages that came while the CLI worked, as its next prompt in the same session."""
        if not self._inbox or self.session is None:
            return None
        texts = []
        while self._inbox:
            text, ref = self._inbox.pop(0)
            texts.append(text)
            await self._emit("message_delivered", {"text": text, "ref": ref})
        prompt = "\n\n".join(f"Message from the person who gave you this task: {text}" for text in texts)
        self.messages.append(Message("user", prompt))
        return prompt

    # ------------------------------------------------------------ how it ended

    def _finished(self, said: Said) -> AgentResult:
        text = str(said.data.get("text") or "")
        if not said.data.get("ok"):
            return self._ended(RunFailed(f"{self.adapter.kind} ended in error: {said.data.get('reason') or text}"))
        summary, assumptions = split_assumptions(text)
        self.spent.seconds = self._seconds()
        return AgentResult(status="finished", detail=summary or "finished", messages=list(self.messages),
                           spent=replace(self.spent), summary=summary or None, assumptions=assumptions)

    def _ended(self, end: RunEnded) -> AgentResult:
        self.spent.seconds = self._seconds()
        return AgentResult(status=end.status, detail=end.detail, messages=list(self.messages),
                           spent=replace(self.spent), budget=end.budget if isinstance(end, BudgetExhausted) else None,
                           question=end.question if isinstance(end, NeedsInput) else None)

    # ------------------------------------------------------------ helpers

    async def _add(self, message: Message) -> None:
        self.messages.append(message)
        await self._emit("message", {"role": message.role, "content": message.content, "tool_call_id": None})

    async def _emit(self, kind: str, data: dict[str, Any]) -> None:
        await emit(self._on_event, self.spent.steps, kind, data)

    def _seconds(self) -> float:
        """The run's seconds so far: its earlier turns', and this one's (not the wait for an answer)."""
        return self._watch.seconds()

    def _seconds_left(self) -> float | None:
        return self._watch.left(self.budgets.max_seconds)


def quiet_from_environment() -> float:
    """``ERRAND_CLI_QUIET_SECONDS`` (default :data:`QUIET_SECONDS`); a clear error if it is not a
    number of seconds above 0."""
    text = os.environ.get("ERRAND_CLI_QUIET_SECONDS", "").strip()
    if not text:
        return QUIET_SECONDS
    try:
        seconds = float(text)
    except ValueError:
        seconds = 0.0
    if not seconds > 0:
        raise ConfigError(f"ERRAND_CLI_QUIET_SECONDS must be a number of seconds above 0, not {text!r}",
                          code="invalid_config")
    return seconds


def split_assumptions(text: str) -> tuple[str, list[str]]:
    """A final message's summary and the assumptions it lists after an ``Assumptions:`` line."""
    lines = text.strip().splitlines()
    for index, line in enumerate(lines):
        if line.strip().strip("*#").strip().lower().rstrip(":") in ("assumptions", "assumption"):
            listed = [item.strip().lstrip("-*•").strip() for item in lines[index + 1:]]
            chosen = [item for item in listed if item and item.lower().rstrip(".") != "none"]
            return "\n".join(lines[:index]).strip(), chosen
    return text.strip(), []


async def _tail(stream: Any, into: bytearray) -> None:
    async for chunk in stream.chunks():
        into.extend(chunk)
        del into[:-_STDERR_TAIL * 4]


async def _stop(process: Any) -> None:
    """Kill the CLI's whole process group, if it still runs, and reap it."""
    if process.returncode is None:
        with contextlib.suppress(ErrandError, OSError):
            await process.kill()
        with contextlib.suppress(ErrandError, OSError, asyncio.TimeoutError):
            await asyncio.wait_for(process.wait(), 30)

