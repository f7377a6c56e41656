"""A loopback OpenAI chat-completions server that plays several agents at once.

Attempts of one round run in parallel and send the same first request, so a queue of
answers cannot say which attempt gets which. This server gives each conversation its own
script: a request with no assistant turn yet opens the next script, and every tool call
id it returns names that script, so the conversation's later requests (which carry those
ids back) continue it, however the attempts interleave. A step can be held behind a
gate the test opens, to act on a run while it is still going.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from engine.harness import Turn

_ID = re.compile(r"^call_c(\d+)_")
USAGE = {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}


@dataclass
class Gate:
    """Holds a conversation's step until :meth:`open`; :attr:`reached` is set once it waits."""

    reached: threading.Event = field(default_factory=threading.Event)
    opened: threading.Event = field(default_factory=threading.Event)

    def open(self) -> None:
        self.opened.set()


class Agents:
    """Scripts handed to conversations in the order they start."""

    def __init__(self, *scripts: list[Turn]) -> None:
        self.scripts = list(scripts)
        self.gates: dict[tuple[int, int], Gate] = {}
        self.seen: dict[int, list[list[dict[str, Any]]]] = {}  # conversation -> the messages of each request
        self.distillations = 0
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.02,), daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def add(self, *scripts: list[Turn]) -> None:
        with self._lock:
            self.scripts.extend(scripts)

    def gate(self, conversation: int, step: int) -> Gate:
        """Hold ``conversation``'s reply number ``step`` (0-based) until the gate opens."""
        return self.gates.setdefault((conversation, step), Gate())

    def start(self) -> Agents:
        self._thread.start()
        return self

    def stop(self) -> None:
        for gate in self.gates.values():
            gate.open()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def reply(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> tuple[int, dict[str, Any]]:
        names = {str((tool.get("function") or {}).get("name")) for tool in tools}
        if names == {"propose_memory"}:  # a round's distillation, not an agent: it learns nothing here
            self.distillations += 1
            return 200, _text_reply("Nothing lasting to propose.")
        assistant = [m for m in messages if m.get("role") == "assistant"]
        with self._lock:
            if not assistant:
                conversation = len(self.seen)
                self.seen[conversation] = []
            else:
                match = _ID.match(str((assistant[0].get("tool_calls") or [{}])[0].get("id", "")))
                if match is None:
                    return 400, {"error": {"message": "not one of this server's conversations"}}
                conversation = int(match.group(1))
            self.seen.setdefault(conversation, []).append(messages)
        step = len(assistant)
        gate = self.gates.get((conversation, step))
        if gate is not None:
            gate.reached.set()
            gate.opened.wait(120)
        if conversation >= len(self.scripts) or step >= len(self.scripts[conversation]):
            return 400, {"error": {"message": f"conversation {conversation} has no step {step}"}}
        calls = [{"id": f"call_c{conversation}_{step}_{i}", "type": "function",
                  "function": {"name": name, "arguments": json.dumps(arguments)}}
                 for i, (name, arguments) in enumerate(self.scripts[conversation][step])]
        return 200, {"id": f"chatcmpl-c{conversation}-{step}", "object": "chat.completion", "created": 0,
                     "model": "wire-model", "usage": USAGE,
                     "choices": [{"index": 0, "finish_reason": "tool_calls",
                                  "message": {"role": "assistant", "content": None, "tool_calls": calls}}]}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        agents = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                status, answer = agents.reply(list(body.get("messages") or []), list(body.get("tools") or []))
                payload = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        return Handler


def _text_reply(text: str) -> dict[str, Any]:
    return {"id": "chatcmpl-text", "object": "chat.completion", "created": 0, "model": "wire-model", "usage": USAGE,
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}]}
