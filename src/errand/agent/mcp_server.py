"""errand's own tools for an agent CLI, over MCP: ``ask_person``, ``recall``, ``propose_memory``.

An agent CLI in a sandbox (Claude Code, Codex, …) is configured with one MCP
server, ``errand``, spoken to over streamable HTTP (the official ``mcp`` SDK,
stateless, JSON replies). It runs on the host, in the worker's process, behind
the model gateway's listener — the one way a sandbox has to the host, its relay
at ``errand.sandbox.GATEWAY_URL`` — under :data:`PATH`. Each run gets a token
of its own (:meth:`ToolServer.open`): a request without a live run's token is
refused before MCP reads a byte of it, and a token reaches only its own run's
MCP server, whose tools hold only that run's :class:`Desk` — its project's
memory and its question. Nothing of the host's filesystem is served.

The tools do what errand's own loop's do:

- ``ask_person(question)`` puts the question on the run's desk and tells the
  agent to end its turn. The CLI's turn over, its run stops with
  ``needs_input`` (:class:`~errand.agent.external.CliAgent`), the task shows the
  question, and the person's answer (``errand answer``, the API, a forge reply)
  resumes the CLI's session with it.
- ``recall(query)`` answers from the project's memory, each memory with where it
  came from.
- ``propose_memory(text)`` lands as a proposal a person accepts before any
  later task is given it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from errand.agent.memory_tools import MEMORY_TOOLS, MemoryHooks, run_memory_tool
from errand.errors import ConfigError
from errand.models import ToolCall

__all__ = ["PATH", "TOOL_NAMES", "Desk", "ToolServer"]

#: Where the server is, below the gateway's address (``GATEWAY_URL + PATH`` inside a sandbox).
PATH = "/mcp"
SERVER_NAME = "errand"
MAX_QUESTION_CHARS = 4000

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

_RECALL, _REMEMBER = MEMORY_TOOLS
_TOOLS: dict[str, tuple[str, dict[str, Any]]] = {
    "ask_person": ("Ask the person who gave you this task a question, when the task is ambiguous or you need "
                   "a decision only they can make (ask early rather than guess). Their answer comes as your next "
                   "message: after calling this, end your turn.",
                   {"type": "object", "properties": {"question": {"type": "string"}}, "required": ["question"],
                    "additionalProperties": False}),
    "recall": (_RECALL.description, _RECALL.parameters),
    "propose_memory": (_REMEMBER.description, _REMEMBER.parameters),
}
TOOL_NAMES = tuple(_TOOLS)
_ASKED = ("Your question is now with the person who gave you this task. End your turn here: do not call more "
          "tools, reply with one line saying you are waiting for their answer. It will come as your next message.")


@dataclass
class Desk:
    """One run's side of errand's tools: its project's memory (``memory``: None when the worker
    keeps none) and the question it asked, until the run takes it (:meth:`take_question`)."""

    memory: MemoryHooks | None = None
    question: str | None = None
    calls: int = field(default=0, compare=False)

    async def call(self, name: str, arguments: dict[str, Any]) -> tuple[str, bool]:
        """Run the tool ``name``: its answer, and whether it went well (False: an error the agent sees)."""
        self.calls += 1
        if name == "ask_person":
            return self._ask(arguments.get("question"))
        if name not in _TOOLS:
            return f"error: errand has no tool {name!r} (it has: {', '.join(TOOL_NAMES)})", False
        if self.memory is None:
            return "error: this worker keeps no project memory, so there is none to recall or add to", False
        ours = "remember" if name == "propose_memory" else "recall"
        result = await run_memory_tool(self.memory, ToolCall(f"mcp-{self.calls}", ours, dict(arguments)))
        return result.content.replace("error: remember:", "error: propose_memory:"), result.ok

    def take_question(self) -> str | None:
        """The question asked since the last take, if any (the run then waits for its answer)."""
        question, self.question = self.question, None
        return question

    def _ask(self, question: object) -> tuple[str, bool]:
        if not isinstance(question, str) or not question.strip():
            return "error: ask_person: 'question' must be a non-empty string", False
        if len(question) > MAX_QUESTION_CHARS:
            return f"error: ask_person: keep a question under {MAX_QUESTION_CHARS} characters", False
        text = question.strip()
        self.question = text if self.question is None else f"{self.question}\n\n{text}"
        return _ASKED, True


class _Run:
    """One run's MCP server (the SDK's), served until :meth:`close`."""

    def __init__(self, run_id: str, desk: Desk) -> None:
        from mcp.server.lowlevel import Server
        from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

        self.run_id = run_id
        self.desk = desk
        server: Server[Any] = Server(SERVER_NAME, version="1", on_list_tools=self._list_tools,
                                     on_call_tool=self._call_tool)
        self.manager = StreamableHTTPSessionManager(server, stateless=True, json_response=True)
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        ready = asyncio.Event()
        self._task = asyncio.create_task(self._serve(ready), name=f"errand-mcp-{self.run_id}")
        waiter = asyncio.ensure_future(ready.wait())
        await asyncio.wait({waiter, self._task}, return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        if self._task.done():
            self._task.result()  # it failed to start: say why

    async def close(self) -> None:
        self._stop.set()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(self._task, 10)

    async def _serve(self, ready: asyncio.Event) -> None:
        # The manager's task group lives in a task of its own: opened and closed from any task.
        async with self.manager.run():
            ready.set()
            await self._stop.wait()

    async def _list_tools(self, _context: Any, _params: Any) -> Any:
        from mcp_types import ListToolsResult, Tool

        return ListToolsResult(tools=[Tool(name=name, description=description, input_schema=schema)
                                      for name, (description, schema) in _TOOLS.items()])

    async def _call_tool(self, _context: Any, params: Any) -> Any:
        from mcp_types import CallToolResult, TextContent

        text, ok = await self.desk.call(str(params.name), dict(params.arguments or {}))
        return CallToolResult(content=[TextContent(text=text)], is_error=not ok)


class ToolServer:
    """errand's MCP server for the agent CLIs of a worker: an ASGI app a gateway mounts at
    :data:`PATH`, one SDK server per run, each reached with its run's token only."""

    def __init__(self) -> None:
        self._runs: dict[str, _Run] = {}  # by token
        self._tokens: dict[str, str] = {}  # run id -> token
        self._stopped = False

    async def open(self, run_id: str, desk: Desk) -> str:
        """Serve ``run_id``'s tools on ``desk``; the token its CLI sends (``Authorization: Bearer``)."""
        if self._stopped:
            raise ConfigError("errand's tool server has stopped", code="tools_stopped")
        if run_id in self._tokens:
            raise ConfigError(f"run {run_id!r} has its tools open already; close them first", code="tools_open")
        run = _Run(run_id, desk)
        await run.start()
        token = "errand-mcp-" + secrets.token_urlsafe(32)
        self._runs[token], self._tokens[run_id] = run, token
        return token

    async def close(self, run_id: str) -> None:
        """End ``run_id``'s tools: its token is refused from now on (a call under way is cut)."""
        token = self._tokens.pop(run_id, None)
        run = self._runs.pop(token, None) if token is not None else None
        if run is not None:
            await run.close()

    async def stop(self) -> None:
        """End every run's tools; everything is refused from now on."""
        self._stopped = True
        for run_id in list(self._tokens):
            await self.close(run_id)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if self._stopped:
            await _refuse(send, 503, "errand tools: the server has stopped")
            return
        run = self._runs.get(_bearer(scope) or "")
        if run is None:
            await _refuse(send, 401, "errand tools: unauthorized (no live run has this token)")
            return
        try:
            await run.manager.handle_request(scope, receive, send)
        except RuntimeError:  # the run's server closed under the request: the client sees a refusal
            await _refuse(send, 503, "errand tools: this run's tools have closed")


def _bearer(scope: Scope) -> str | None:
    for name, value in scope.get("headers") or ():
        if name.lower() == b"authorization":
            text = value.decode("latin-1")
            return text[7:].strip() if text[:7].lower() == "bearer " else None
    return None


async def _refuse(send: Send, status: int, message: str) -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": -32001, "message": message}}).encode()
    with contextlib.suppress(Exception):  # the response may have begun: then the connection just ends
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
